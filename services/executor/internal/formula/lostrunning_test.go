package formula

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// deliver hands d to the executor as the consumer does, delivered times
// (more than once: a redelivery), published at sent.
func (h *harness) deliver(t *testing.T, d *events.Dispatch, sent time.Time, delivered int) error {
	t.Helper()
	env, err := events.NewAt("d1", "planner/test", sent, d)
	if err != nil {
		t.Fatal(err)
	}
	return h.x.Handle(context.Background(), &consume.Event{Envelope: env, Delivered: uint64(delivered)})
}

// loseFirst makes the bus lose the first event of node n with status st
// (a partition: its publish never stored), and every event emitted after
// it in the same flush, as an outbox whose flush fails. It returns what
// was emitted, lost or not.
func (h *harness) loseFirst(n string, st dag.NodeState) func() []eventbustest.Emitted {
	var mu sync.Mutex
	var seen []eventbustest.Emitted
	lost := false
	h.bus.out.Fail = func(e eventbustest.Emitted) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, e)
		if p, ok := e.Payload.(*events.NodeEvent); ok && !lost && p.Node == n && p.Status == st {
			lost = true
			return errors.New("publish: no response from stream (partition)")
		}
		return nil
	}
	return func() []eventbustest.Emitted {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// nodeEvents are the stored events of node n, each as "status attempt
// (generation g)", and the stored running events themselves.
func nodeEvents(out *eventbustest.MemoryOutbox, n string) ([]string, []eventbustest.Emitted) {
	var desc []string
	var running []eventbustest.Emitted
	for _, e := range out.Stored() {
		p, ok := e.Payload.(*events.NodeEvent)
		if !ok || p.Node != n {
			continue
		}
		desc = append(desc, fmt.Sprintf("%s %d (generation %d)", p.Status, p.Attempt, p.Generation))
		if p.Status == dag.NodeRunning {
			running = append(running, e)
		}
	}
	return desc, running
}

// sameRunning fails unless the running event stored is the one emitted
// first: the same message id, start, attempt and generation.
func sameRunning(t *testing.T, stored, first eventbustest.Emitted) {
	t.Helper()
	s, f := stored.Payload.(*events.NodeEvent), first.Payload.(*events.NodeEvent)
	if stored.MsgID != first.MsgID {
		t.Fatalf("running stored under message id %q, first emitted under %q", stored.MsgID, first.MsgID)
	}
	if s.StartedAt == nil || f.StartedAt == nil || !s.StartedAt.Equal(*f.StartedAt) {
		t.Fatalf("running stored with started_at %v, first emitted with %v", s.StartedAt, f.StartedAt)
	}
	if s.Attempt != f.Attempt || s.GenAttempt != f.GenAttempt || s.Generation != f.Generation || s.SpecHash != f.SpecHash {
		t.Fatalf("running stored %+v, first emitted %+v", s, f)
	}
}

// firstRunning is the first running event of node n among es.
func firstRunning(t *testing.T, es []eventbustest.Emitted, n string) eventbustest.Emitted {
	t.Helper()
	for _, e := range es {
		if p, ok := e.Payload.(*events.NodeEvent); ok && p.Node == n && p.Status == dag.NodeRunning {
			return e
		}
	}
	t.Fatalf("no running of %s emitted", n)
	return eventbustest.Emitted{}
}

// The first delivery started the node and recorded it, but its running
// was never stored (a partition); the command succeeded and its outcome
// was recorded, and the flush failed. The redelivery finds the node
// recorded succeeded: it publishes the attempt's running again, as the
// first delivery did (the same message id and start), before its end, so
// the stream holds running then succeeded, once each.
func TestRedeliveryPublishesTheRunningItsFirstDeliveryLost(t *testing.T) {
	t.Parallel()
	h := newHarness()
	emitted := h.loseFirst("n", dag.NodeRunning)
	d := dispatch(dag.OpCreate, 1, node("n", "ok", 1))
	sent := time.Now().UTC()
	if err := h.deliver(t, d, sent, 1); err == nil {
		t.Fatal("the first delivery's flush lost n's running but did not fail")
	}
	if r := h.record(dag.OpCreate, "n"); r.Status != dag.NodeSucceeded || r.Attempt != 1 {
		t.Fatalf("record %+v, want succeeded at attempt 1", r)
	}
	if err := h.deliver(t, d, sent, 2); err != nil {
		t.Fatal(err)
	}
	got, running := nodeEvents(h.bus.out, "n")
	if want := []string{"running 1 (generation 1)", "succeeded 1 (generation 1)"}; !slices.Equal(got, want) {
		t.Fatalf("stored for n: %q, want %q", got, want)
	}
	sameRunning(t, running[0], firstRunning(t, emitted(), "n"))
	if ran := h.host.scripts(); !slices.Equal(ran, []string{"ok"}) {
		t.Fatalf("ran %q, want n's command once", ran)
	}
}

// The same when the node failed, and when its record was left running
// (the outcome could not be recorded either): the redelivery re-attaches
// to the attempt on the host and announces it again with its own start.
func TestRedeliveryPublishesTheLostRunningOfEveryEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		exit         int
		failOutcome  bool
		end          string
	}{
		{"failed", "fails", 3, false, "failed 1 (generation 1)"},
		{"outcome unrecorded", "ok", 0, true, "succeeded 1 (generation 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness()
			h.host.exits[tc.script] = []int{tc.exit}
			emitted := h.loseFirst("n", dag.NodeRunning)
			if tc.failOutcome {
				puts := 0
				h.records.Fail = func(op, key string) error {
					if op == "put" && key == h.key(dag.OpCreate, "n") {
						if puts++; puts == 2 {
							return errors.New("the bucket does not answer")
						}
					}
					return nil
				}
			}
			d := dispatch(dag.OpCreate, 1, node("n", tc.script, 1))
			sent := time.Now().UTC()
			if err := h.deliver(t, d, sent, 1); err == nil {
				t.Fatal("the first delivery did not fail")
			}
			time.Sleep(10 * time.Millisecond) // a start taken again would differ
			if err := h.deliver(t, d, sent, 2); err != nil {
				t.Fatal(err)
			}
			got, running := nodeEvents(h.bus.out, "n")
			if want := []string{"running 1 (generation 1)", tc.end}; !slices.Equal(got, want) {
				t.Fatalf("stored for n: %q, want %q", got, want)
			}
			sameRunning(t, running[0], firstRunning(t, emitted(), "n"))
		})
	}
}

// A dispatch of a cancelled run settles the attempt its executor left
// running: the attempt's running (lost with that executor) is published
// before the end found on the host.
func TestSettlePublishesTheAttemptsRunningFirst(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowCancelled})
	h.orphan("n", &hostexec.Result{ExitCode: 0})
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "quick", 1))); err != nil {
		t.Fatal(err)
	}
	got, running := nodeEvents(h.bus.out, "n")
	if want := []string{"running 1 (generation 1)", "succeeded 1 (generation 1)"}; !slices.Equal(got, want) {
		t.Fatalf("stored for n: %q, want %q", got, want)
	}
	if p := running[0].Payload.(*events.NodeEvent); p.GenAttempt != 1 || p.SpecHash != "h-n" {
		t.Fatalf("running %+v, want attempt 1 of its generation", p)
	}
	if want := msgID(events.Ref{WorkflowID: "w1", Formula: "f", Generation: 1}, "n", "running", 1); running[0].MsgID != want {
		t.Fatalf("running under message id %q, want %q", running[0].MsgID, want)
	}
}

// callLog is an Emitter that notes each Emit (a node's status) and Flush.
type callLog struct {
	Emitter
	mu    sync.Mutex
	calls []string
}

func (c *callLog) Emit(ctx context.Context, subject string, pl events.Payload, msgID string) {
	if p, ok := pl.(*events.NodeEvent); ok {
		c.mu.Lock()
		c.calls = append(c.calls, p.Node+" "+string(p.Status))
		c.mu.Unlock()
	}
	c.Emitter.Emit(ctx, subject, pl, msgID)
}

func (c *callLog) Flush(ctx context.Context) error {
	c.mu.Lock()
	c.calls = append(c.calls, "flush")
	c.mu.Unlock()
	return c.Emitter.Flush(ctx)
}

// A node's end is emitted only once its running is stored: the events
// emitted before an end are flushed first. Published without waiting, a
// running lost in flight (a partition between the executor's server and
// the stream's leader) and sent again at the flush would otherwise be
// stored after the end that followed it once the partition healed: a
// node running after it succeeded.
func TestANodesEndFollowsItsStoredRunning(t *testing.T) {
	t.Parallel()
	h := newHarness()
	log := &callLog{}
	h.bus.wrap = func(e Emitter) Emitter { log.Emitter = e; return log }
	h.host.exits["bad"] = []int{3}
	d := dispatch(dag.OpCreate, 1, node("a", "ok", 1), node("b", "bad", 1, "a"))
	if err := h.deliver(t, d, time.Now().UTC(), 1); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	calls := slices.Clone(log.calls)
	log.mu.Unlock()
	for _, end := range []string{"a succeeded", "b failed"} {
		i := slices.Index(calls, end)
		running := slices.Index(calls, strings.Fields(end)[0]+" running")
		if i < 0 || running < 0 || running > i {
			t.Fatalf("calls %q: want %q after its running", calls, end)
		}
		if !slices.Contains(calls[running:i], "flush") {
			t.Errorf("calls %q: %q emitted with its running not flushed", calls, end)
		}
	}
}

// When the flush before a node's end fails (its running was not stored),
// the end is not published, nothing more of the formula is, and no node
// starts after it: the stream never holds an end without the running
// before it, and the redelivery publishes both, in order, then goes on.
func TestNothingFollowsAnEndWhoseRunningWasNotStored(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.loseFirst("a", dag.NodeRunning)
	d := dispatch(dag.OpCreate, 1, node("a", "ok", 1), node("b", "next", 1, "a"))
	sent := time.Now().UTC()
	if err := h.deliver(t, d, sent, 1); err == nil {
		t.Fatal("the first delivery lost a's running but did not fail")
	}
	for _, n := range []string{"a", "b"} {
		if got, _ := nodeEvents(h.bus.out, n); len(got) != 0 {
			t.Errorf("first delivery stored for %s: %q, want nothing", n, got)
		}
	}
	if ran := h.host.scripts(); !slices.Equal(ran, []string{"ok"}) {
		t.Fatalf("first delivery ran %q, want only a's command", ran)
	}
	if err := h.deliver(t, d, sent, 2); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string][]string{"a": {"running 1 (generation 1)", "succeeded 1 (generation 1)"}, "b": {"running 1 (generation 1)", "succeeded 1 (generation 1)"}} {
		if got, _ := nodeEvents(h.bus.out, n); !slices.Equal(got, want) {
			t.Errorf("stored for %s: %q, want %q", n, got, want)
		}
	}
}
