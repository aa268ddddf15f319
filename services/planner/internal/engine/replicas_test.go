package engine

import (
	"context"

	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// replica is a second planner on the same stores and bus, as a second
// replica of the planner service is: its own memory, the same KV buckets.
func (h *harness) replica() *Engine {
	e := h.e
	return &Engine{Workflows: e.Workflows, Runs: e.Runs, Nodes: e.Nodes, Out: e.Out, Log: e.Log, Now: e.Now,
		WorkflowRevs: e.WorkflowRevs, RunRevs: e.RunRevs}
}

// Without watches of the revisions, the records are read again: the same
// checks hold.
func TestReplicaWithoutRevisionWatches(t *testing.T) {
	for name, test := range map[string]func(*testing.T, *harness){"pause": testReplicaSeesAPause, "steps": testReplicaStepsTheSavedRun} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.e.WorkflowRevs, h.e.RunRevs = nil, nil
			test(t, h)
		})
	}
}

// Two planner replicas share a workflow's events and control requests.
// One pauses it; the other, which has the run in memory from before,
// must see the pause and dispatch nothing when the next formula
// succeeds. Before, the other replica stepped its stale copy of the run
// and dispatched b in the paused workflow (its snapshot write even went
// through: a pause changes the workflow record, not the snapshot).
func TestReplicaSeesAPauseMadeByAnother(t *testing.T) { testReplicaSeesAPause(t, newHarness(t)) }

func testReplicaSeesAPause(t *testing.T, h *harness) {
	if err := h.submit(chain); err != nil {
		t.Fatal(err)
	}
	a, b := h.e, h.replica()
	h.stored()
	h.e = b
	if err := h.control(events.VerbPause); err != nil {
		t.Fatal(err)
	}
	h.e = a // still holds the run as it was before the pause
	if err := h.formula("a", 1, dag.FormulaSucceeded); err != nil {
		t.Fatal(err)
	}
	if got := h.stored(); slices.Contains(got, "dispatch b create g1") {
		t.Fatalf("the paused workflow dispatched b: %q", got)
	}
	if st := h.status(); st != dag.WorkflowPaused {
		t.Fatalf("workflow %s, want paused", st)
	}
	h.e = b
	if err := h.control(events.VerbResume); err != nil {
		t.Fatal(err)
	}
	if got := h.stored(); !slices.Contains(got, "dispatch b create g1") {
		t.Fatalf("resume did not dispatch b: %q", got)
	}
}

// Two replicas, each handed one of two formula outcomes of a run: the one
// that handles the second outcome, holding the run as it was before the
// first, steps the saved state (which has the first), not its stale copy.
// Under on_failure stop, x's failure handled by one replica means the
// other dispatches nothing when a succeeds, and the run ends failed once.
func TestReplicaStepsTheSavedRunNotItsOwnCopy(t *testing.T) {
	testReplicaStepsTheSavedRun(t, newHarness(t))
}

func testReplicaStepsTheSavedRun(t *testing.T, h *harness) {
	if err := h.submit(parallel); err != nil {
		t.Fatal(err)
	}
	a, b := h.e, h.replica()
	// b has the run in memory too: it handled an event of it earlier.
	h.e = b
	if err := h.formula("a", 1, dag.FormulaRunning); err != nil {
		t.Fatal(err)
	}
	h.stored()
	h.e = a
	if err := h.formula("x", 1, dag.FormulaFailed); err != nil {
		t.Fatal(err)
	}
	first := h.stored()
	h.e = b
	if err := h.formula("a", 1, dag.FormulaSucceeded); err != nil {
		t.Fatal(err)
	}
	second := h.stored()
	for _, e := range append(first, second...) {
		if e == "dispatch y create g1" {
			t.Fatalf("y dispatched after x failed under on_failure stop: %q then %q", first, second)
		}
	}
	if !slices.Contains(second, "workflow failed: formula x failed") {
		t.Fatalf("the run did not end failed: %q then %q", first, second)
	}
	if st := h.status(); st != dag.WorkflowFailed {
		t.Fatalf("workflow %s", st)
	}
}

// A control request whose run snapshot write loses to another replica's
// step (the other replica saved the run between this one's record write
// and its commit) still takes effect everywhere and answers success: the
// snapshot the executors read says paused, then running again after the
// resume, which dispatches what became ready while paused. Before, the pause answered an
// error while its event and record said paused and the snapshot did not.
func TestControlThatLosesTheSnapshotToAnotherReplica(t *testing.T) {
	for _, verb := range []string{events.VerbPause, events.VerbResume} {
		t.Run(verb, func(t *testing.T) {
			h := newHarness(t)
			if err := h.submit(parallel); err != nil {
				t.Fatal(err)
			}
			if verb == events.VerbResume {
				if err := h.control(events.VerbPause); err != nil {
					t.Fatal(err)
				}
				if err := h.formula("x", 1, dag.FormulaSucceeded); err != nil { // y is ready, held
					t.Fatal(err)
				}
			}
			h.stored()
			other := h.replica()
			other.Out = &eventbustest.MemoryOutbox{} // its own: the engine's is busy flushing
			stepped := false
			h.out.Fail = func(e eventbustest.Emitted) error {
				if w, ok := e.Payload.(*events.WorkflowEvent); ok && !stepped && (w.Status == dag.WorkflowPaused || w.Status == dag.WorkflowRunning) {
					stepped = true
					ev := h.event(&events.FormulaEvent{Ref: h.ref("a", 1), Status: dag.FormulaSucceeded})
					if err := other.Handle(context.Background(), ev); err != nil {
						t.Errorf("the other replica's step: %v", err)
					}
				}
				return nil
			}
			reply, err := h.e.Control(context.Background(), h.id, verb, operator)
			if !stepped {
				t.Fatal("the other replica never stepped the run")
			}
			want := dag.WorkflowPaused
			if verb == events.VerbResume {
				want = dag.WorkflowRunning
			}
			if err != nil || reply.Status != want {
				t.Fatalf("%s: %+v, %v; want %s", verb, reply, err, want)
			}
			snap, _, err := h.runs.Get(context.Background(), h.id)
			if err != nil || snap.Status != want {
				t.Fatalf("the run snapshot says %q (%v), want %s", snap.Status, err, want)
			}
			if verb == events.VerbResume {
				if got := h.stored(); !slices.Contains(got, "dispatch y create g1") {
					t.Fatalf("the resume did not dispatch y: %q", got)
				}
			}
		})
	}
}
