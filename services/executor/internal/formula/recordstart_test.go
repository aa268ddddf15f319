package formula

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// A cancelled run's dispatch that settles an attempt publishes its
// running with the start its record holds.
func TestSettlePublishesTheRecordedStart(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowCancelled})
	started := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	h.orphan("n", nil)
	h.records.Set(h.key(dag.OpCreate, "n"), Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n", StartedAt: &started})
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "sleep", 1))); err != nil {
		t.Fatal(err)
	}
	got, running := nodeEvents(h.bus.out, "n")
	if want := []string{"running 1 (generation 1)", "cancelled 1 (generation 1)"}; !slices.Equal(got, want) {
		t.Fatalf("stored for n: %q, want %q", got, want)
	}
	if p := running[0].Payload.(*events.NodeEvent); p.StartedAt == nil || !p.StartedAt.Equal(started) {
		t.Fatalf("running %+v, want the recorded start %v", p, started)
	}
	for _, e := range h.bus.out.Stored() {
		if p, ok := e.Payload.(*events.NodeEvent); ok && p.Status == dag.NodeCancelled && (p.StartedAt == nil || !p.StartedAt.Equal(started)) {
			t.Fatalf("cancelled %+v, want the recorded start %v", p, started)
		}
	}
}

// A retry that settles an attempt of the earlier generation publishes
// that attempt's running as it was (its generation, message id and
// start), before the end it found; an attempt recorded before records
// held their start is not announced again.
func TestRetryPublishesTheSettledAttemptsRunningOfItsGeneration(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning})
	started := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	h.orphan("n", &hostexec.Result{ExitCode: 0})
	h.records.Set(h.key(dag.OpCreate, "n"), Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n", StartedAt: &started})
	h.orphan("m", &hostexec.Result{ExitCode: 0}) // no start recorded
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 2, node("n", "quick", 1), node("m", "quick", 1, "n"))); err != nil {
		t.Fatal(err)
	}
	got, running := nodeEvents(h.bus.out, "n")
	if want := []string{"running 1 (generation 1)", "succeeded 1 (generation 2)"}; !slices.Equal(got, want) {
		t.Fatalf("stored for n: %q, want %q", got, want)
	}
	if p := running[0].Payload.(*events.NodeEvent); p.StartedAt == nil || !p.StartedAt.Equal(started) {
		t.Fatalf("running %+v, want the recorded start %v", p, started)
	}
	if want := msgID(events.Ref{WorkflowID: "w1", Formula: "f", Generation: 1}, "n", "running", 1); running[0].MsgID != want {
		t.Fatalf("running under message id %q, want %q", running[0].MsgID, want)
	}
	if got, _ := nodeEvents(h.bus.out, "m"); !slices.Equal(got, []string{"succeeded 1 (generation 2)"}) {
		t.Fatalf("stored for m: %q", got)
	}
}

// A node that succeeded in an earlier generation is reported done by a
// retry without its running being published again: it did not run in
// this generation, and nothing more is stored for it.
func TestRetryDoesNotRepublishTheRunningOfAnEarlierGenerationsEnd(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning})
	started := time.Now().UTC().Add(-time.Hour)
	h.records.Set(h.key(dag.OpCreate, "n"), Record{Status: dag.NodeSucceeded, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n", StartedAt: &started})
	n := node("n", "ok", 1)
	n.AlreadyDone = true
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 2, n)); err != nil {
		t.Fatal(err)
	}
	if got, _ := nodeEvents(h.bus.out, "n"); !slices.Equal(got, []string{"succeeded 1 (generation 2)"}) {
		t.Fatalf("stored for n: %q", got)
	}
}

// An attempt announced again (a redelivery re-attaching to it) keeps its
// start: the record holds it.
func TestReattachedAttemptKeepsItsStart(t *testing.T) {
	t.Parallel()
	h := newHarness()
	puts := 0
	h.records.Fail = func(op, key string) error {
		if op == "put" && key == h.key(dag.OpCreate, "n") {
			if puts++; puts == 2 {
				return errors.New("the bucket does not answer")
			}
		}
		return nil
	}
	d := dispatch(dag.OpCreate, 1, node("n", "ok", 1))
	sent := time.Now().UTC()
	if err := h.deliver(t, d, sent, 1); err == nil {
		t.Fatal("the first delivery recorded the outcome")
	}
	first, running := nodeEvents(h.bus.out, "n")
	if !slices.Equal(first, []string{"running 1 (generation 1)"}) {
		t.Fatalf("first delivery stored %q", first)
	}
	r := h.record(dag.OpCreate, "n")
	if r.StartedAt == nil || !r.StartedAt.Equal(*running[0].Payload.(*events.NodeEvent).StartedAt) {
		t.Fatalf("record %+v holds another start than its running's", r)
	}
	h.bus.out = &eventbustest.MemoryOutbox{}
	time.Sleep(10 * time.Millisecond)
	if err := h.deliver(t, d, sent, 2); err != nil {
		t.Fatal(err)
	}
	_, again := nodeEvents(h.bus.out, "n")
	sameRunning(t, again[0], running[0])
	var end *events.NodeEvent
	for _, e := range h.bus.out.Stored() {
		if p, ok := e.Payload.(*events.NodeEvent); ok && p.Status == dag.NodeSucceeded {
			end = p
		}
	}
	if end == nil || end.StartedAt == nil || !end.StartedAt.Equal(*r.StartedAt) {
		t.Fatalf("succeeded %+v, want the attempt's start %v", end, r.StartedAt)
	}
}

// With JetStream: a retry settles an attempt of the earlier generation
// whose running was stored longer ago than the duplicate window. The
// running it publishes again is looked for first, and found: the stream
// holds it once.
func TestRetryDoesNotStoreTheSettledAttemptsRunningTwice(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const window = time.Second
	ns := natstest.Start(t)
	admin := eventStream(ctx, t, ns, window)
	nc := ns.Connect(events.Executor)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness()
	h.x.Bus = NewBus(&eventbus.Publisher{JS: js, NC: nc, Source: "executor/test"})
	// Generation 1: the attempt ran, its running was stored, its outcome
	// was never recorded (its executor died).
	puts := 0
	h.records.Fail = func(op, key string) error {
		if op == "put" && key == h.key(dag.OpCreate, "n") {
			if puts++; puts == 2 {
				return errors.New("the bucket does not answer")
			}
		}
		return nil
	}
	d := dispatch(dag.OpCreate, 1, node("n", "ok", 1))
	if err := h.deliver(t, d, time.Now().UTC(), 1); err == nil {
		t.Fatal("the outcome was recorded")
	}
	h.records.Fail = nil
	time.Sleep(2 * window)
	// The workflow is retried: generation 2 settles attempt 1.
	h.snapshot(events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning})
	d2 := dispatch(dag.OpCreate, 2, node("n", "ok", 1))
	if err := h.deliver(t, d2, time.Now().UTC(), 1); err != nil {
		t.Fatal(err)
	}
	got := storedEvents(ctx, t, admin)
	want := "[f running n running f running n succeeded f succeeded]"
	if fmt.Sprint(got) != want {
		t.Fatalf("stream holds %v, want %s", got, want)
	}
	if ran := h.host.scripts(); len(ran) != 1 || !strings.HasPrefix(ran[0], "ok") {
		t.Fatalf("ran %q", ran)
	}
}
