package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storedMsg is one message of the event stream as it is stored.
type storedMsg struct {
	seq     uint64
	subject string
	data    []byte
	env     *events.Envelope
}

// storedOf reads every event of workflow id from the event stream, with
// its sequence, subject and bytes.
func (s *stack) storedOf(id string) []storedMsg {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := s.js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []storedMsg
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			s.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			env, err := events.Parse(m.Data())
			meta, merr := m.Metadata()
			if err != nil || merr != nil {
				s.t.Fatalf("bad message in the event stream: %v %v", err, merr)
			}
			if strings.HasPrefix(env.Subject, id) {
				out = append(out, storedMsg{meta.Sequence.Stream, m.Subject(), m.Data(), env})
			}
		}
		if n == 0 {
			return out
		}
	}
}

// A stream as a NATS cluster left it after a long loss of quorum: an event
// stored twice, and a node's running stored after its succeeded, each
// published with the executor's own credential (as an executor that
// publishes again after the duplicate window does). The state-store
// applies neither (gantry status still shows the node succeeded after two
// transitions), and gantry state --rebuild --check, which finds the
// projection equal to a replay, reports both with their workflow, node and
// stream sequences, and a node whose executor's record (gantry_nodes)
// says otherwise than the stream, and exits 1.
func TestRebuildCheckFindsABadStream(t *testing.T) {
	s := newStack(t, stackOptions{})
	bin := buildGantry(t)
	c := &dag.Composition{Name: "bad-stream", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "f", Server: "me", Nodes: []dag.Node{{Name: "a", Run: "true"}, {Name: "b", Run: "true"}, {Name: "c", Run: "true"}}}}}
	id := s.mustSubmit(c)
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("run: %s", d.Status)
	}
	s.waitFor("the state-store to catch up", 10*time.Second, func() bool { return stateCaughtUp(s.js) })
	msgs := s.storedOf(id)
	find := func(st dag.NodeState, node string) storedMsg {
		t.Helper()
		for _, m := range msgs {
			var e events.NodeEvent
			if m.env.Type == events.NodeType(st) && events.DecodeData(m.env, &e) == nil && e.Node == node {
				return m
			}
		}
		t.Fatalf("no %s event of node %s in the stream", st, node)
		return storedMsg{}
	}
	aSucceeded, bRunning, bSucceeded := find(dag.NodeSucceeded, "a"), find(dag.NodeRunning, "b"), find(dag.NodeSucceeded, "b")

	ctx := context.Background()
	x, err := jetstream.New(s.ns.Connect(events.Executor))
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, data []byte, msgID string) uint64 {
		t.Helper()
		ack, err := x.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
		if err != nil {
			t.Fatalf("publish as the executor: %v", err)
		}
		return ack.Sequence
	}
	// a's succeeded, the same event stored again
	dupSeq := publish(aSucceeded.subject, aSucceeded.data, "planted-duplicate")
	// b's running of attempt 1, under an id of its own, after b succeeded
	late := *bRunning.env
	late.ID = "5f0e8d9a-6b1c-4c2d-8e3f-000000000001"
	data, _ := json.Marshal(&late)
	lateSeq := publish(bRunning.subject, data, "planted-late-running")
	// c's record, as an executor writes it, says it failed
	nodes, err := eventbus.NewBucket[events.NodeRecord](ctx, x, events.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	key := events.NodeKey(id, dag.OpCreate, "f", "c")
	rec, rev, err := nodes.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	rec.Status = dag.NodeFailed
	if _, err := nodes.Put(ctx, key, rec, rev); err != nil {
		t.Fatal(err)
	}

	s.waitFor("the state-store to apply the planted events", 10*time.Second, func() bool { return stateCaughtUp(s.js) })
	d := s.wait(id, 5*time.Second)
	for _, n := range []string{"a", "b"} {
		if nd := d.Formulas["f"].Nodes[n]; nd == nil || nd.Status != dag.NodeSucceeded || nd.Transitions != 2 || nd.Attempts != 1 {
			t.Errorf("status of node %s after the planted events: %+v; want succeeded after 2 transitions, 1 attempt", n, nd)
		}
	}

	start := time.Now()
	out, err := s.gantryCmd(bin, events.Operator, "state", "--rebuild", "--check").CombinedOutput()
	code := exitOf(t, err)
	t.Logf("gantry state --rebuild --check (%.1fs), exit %d:\n%s", time.Since(start).Seconds(), code, out)
	want := []string{
		"0 differ from the projection",
		fmt.Sprintf("duplicate          workflow %s f/a at stream sequence %d, %d: gantry.node.succeeded (event %s) stored again", id, aSucceeded.seq, dupSeq, aSucceeded.env.ID),
		fmt.Sprintf("out_of_order       workflow %s f/b at stream sequence %d, %d: gantry.node.running (generation 1, attempt 1) stored after gantry.node.succeeded (generation 1, attempt 1)", id, bSucceeded.seq, lateSeq),
		fmt.Sprintf("contradicts_record workflow %s f/c", id),
		"the executor recorded failed",
		"3 problem(s)",
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Errorf("the check does not say %q", w)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
}

// --timeout bounds gantry state --rebuild --check as a whole: against a
// state-store that takes the request and never answers, it gives up when
// the timeout has passed, saying so, and exits 3.
func TestRebuildCheckHonoursItsTimeout(t *testing.T) {
	ns := natstest.StartWith(t, natsembed.Config{})
	bin := buildGantry(t)
	nc := ns.Connect(events.StateStore)
	if _, err := nc.QueueSubscribe(events.StateRebuild, "q", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, "state", "--rebuild", "--check", "--timeout", "2s",
		"--server", ns.URL(), "--nkey", ns.Keys.SeedFile(events.Operator)).CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("gantry state --rebuild --check --timeout 2s did not return within 15s\n%s", out)
	}
	code := exitOf(t, err)
	t.Logf("returned after %.2fs, exit %d: %s", took.Seconds(), code, out)
	if took < 1900*time.Millisecond || took > 3500*time.Millisecond {
		t.Errorf("returned after %.2fs, want about 2s", took.Seconds())
	}
	if code != 3 || !strings.Contains(string(out), "no answer from the state-store within --timeout 2s") {
		t.Errorf("exit %d, want 3 and the reason\n%s", code, out)
	}
}
