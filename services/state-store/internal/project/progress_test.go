package project_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// progress applies a progress event of the node's attempt; seq 0 takes the
// next stream sequence, another is a redelivery of that one.
func (w *wf) progress(node string, attempt, percent int, seq uint64) {
	f := w.f
	f.t.Helper()
	if seq == 0 {
		f.seq++
		seq = f.seq
	}
	ev := &events.ProgressEvent{Ref: events.Ref{WorkflowID: w.id, Workflow: w.name, Formula: w.formula, Host: w.host, Node: node, Operation: w.op, Generation: 1},
		Attempt: attempt, Percent: percent}
	env, err := events.NewAt(fmt.Sprintf("ev-%d", seq), "test/1", f.at, ev)
	if err != nil {
		f.t.Fatal(err)
	}
	f.p.Apply(context.Background(), []*consume.Event{{Envelope: env, Subject: events.HostLifecycle(w.host), Stream: seq}}, max(seq, f.seq))
}

func (f *feed) nodeDoc(id, node string) (events.NodeDoc, map[string]any) {
	f.t.Helper()
	var nd events.NodeDoc
	var raw map[string]any
	b := f.mem.Vals[project.NodeDocKey(id, "f", node)]
	if err := json.Unmarshal(b, &nd); err != nil {
		f.t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		f.t.Fatal(err)
	}
	return nd, raw
}

// The node document keeps the last percent of the current attempt: a
// redelivered or late event changes nothing, one of another attempt is
// ignored, a new attempt starts without one, and none is no field at all.
// Progress is not a transition.
func TestProgressProjected(t *testing.T) {
	f := newFeed(t)
	w := f.workflow("w", "wf-1", dag.OpCreate)
	w.progress("a", 1, 5, 0) // before the node is known: nothing to attach it to
	w.node("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Run: events.Run{Attempt: 1}})
	if _, raw := f.nodeDoc("wf-1", "a"); raw["progress"] != nil {
		t.Fatalf("progress before any: %v", raw["progress"])
	}
	w.progress("a", 1, 10, 0)
	w.progress("a", 1, 50, 0)
	fifty := f.seq
	w.progress("a", 1, 40, fifty-1) // an earlier sequence, delivered late: ignored
	w.progress("a", 1, 50, fifty)   // redelivered
	if nd, _ := f.nodeDoc("wf-1", "a"); nd.Progress != 50 || nd.Transitions != 1 || nd.Attempts != 1 {
		t.Fatalf("after 10, 50 and redeliveries: %+v", nd)
	}
	code := 1
	w.node("a", dag.NodeFailed, events.NodeEvent{SpecHash: spec("a"), WillRetry: true, Run: events.Run{Attempt: 1, ExitCode: &code}})
	if nd, _ := f.nodeDoc("wf-1", "a"); nd.Progress != 50 {
		t.Fatalf("the failed attempt's last percent: %+v", nd)
	}
	w.node("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Run: events.Run{Attempt: 2}})
	if nd, raw := f.nodeDoc("wf-1", "a"); nd.Progress != 0 || raw["progress"] != nil {
		t.Fatalf("a new attempt kept the old percent: %+v", nd)
	}
	w.progress("a", 1, 90, 0) // of the first attempt, late
	w.progress("a", 2, 30, 0)
	if nd, _ := f.nodeDoc("wf-1", "a"); nd.Progress != 30 || nd.Transitions != 3 || nd.Attempts != 2 {
		t.Fatalf("second attempt: %+v", nd)
	}
}
