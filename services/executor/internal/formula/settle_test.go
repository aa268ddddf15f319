package formula

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// orphan sets up what an executor that died while node n ran attempt 1
// of generation 1 leaves: its record says running, and the host has the
// attempt, still running (ended: with that result instead).
func (h *harness) orphan(n string, ended *hostexec.Result) {
	if _, err := h.records.Put(context.Background(), h.key(dag.OpCreate, n), Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-" + n}, 0); err != nil {
		panic(err)
	}
	id := "w1.1.create.f." + n + ".1.run"
	if ended != nil {
		h.host.done[id] = *ended
	} else {
		h.host.orphans[id] = true
	}
}

func (h *harness) snapshot(s events.RunSnapshot) {
	_, rev, _ := h.runs.Get(context.Background(), "w1")
	if _, err := h.runs.Put(context.Background(), "w1", s, rev); err != nil {
		panic(err)
	}
}

func wantStored(t *testing.T, h *harness, want ...string) {
	t.Helper()
	if got := h.stored(); !slices.Equal(got, want) {
		t.Fatalf("stored\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	h.bus.out = &eventbustest.MemoryOutbox{}
}

// A dispatch of a workflow being cancelled, delivered again after its
// executor died: nothing starts, the attempt left running on the host is
// killed there, and each node ends as it did (the attempt's running,
// maybe lost with that executor, published again first).
func TestCancelledDispatchKillsWhatWasLeftRunning(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning, Cancelling: true})
	h.orphan("n", nil)
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "sleep", 1), node("m", "ok", 1, "n"))); err != nil {
		t.Fatal(err)
	}
	wantStored(t, h, "n running 1", "n cancelled 1: cancelled: killed on the host", "m blocked 0", "f cancelled")
	if r := h.record(dag.OpCreate, "n"); r.Status != dag.NodeCancelled || r.ExitCode == nil || *r.ExitCode != 143 {
		t.Fatalf("record %+v", r)
	}
	if ran := h.host.scripts(); len(ran) != 0 {
		t.Fatalf("ran %q", ran)
	}
	if !slices.Equal(h.host.settled, []string{"w1.1.create.f.n.1.run killed"}) {
		t.Fatalf("settled %q", h.host.settled)
	}
}

// The same when the attempt had ended on the host (it succeeded): the
// success is recorded and announced, and a retry does not run it again.
func TestCancelledDispatchKeepsASuccessFoundOnTheHost(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowCancelled})
	h.orphan("n", &hostexec.Result{ExitCode: 0, Stdout: "done\n"})
	d := dispatch(dag.OpCreate, 1, node("n", "quick", 1), node("m", "ok", 1, "n"))
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	wantStored(t, h, "n running 1", "n succeeded 1: it ended on the host while no executor followed it", "m cancelled 0: not started: the workflow was cancelled", "f cancelled")
	if r := h.record(dag.OpCreate, "n"); r.Status != dag.NodeSucceeded {
		t.Fatalf("record %+v", r)
	}
	h.snapshot(events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning})
	d.Generation = 2
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	wantStored(t, h, "f running", "n succeeded 1: already recorded succeeded", "m running 1", "m succeeded 1", "f succeeded")
	if ran := h.host.scripts(); !slices.Equal(ran, []string{"ok"}) {
		t.Fatalf("ran %q, want only m's command", ran)
	}
}

// A retry that finds an attempt of the earlier generation still recorded
// running (no executor saw the cancel through) ends it on the host first:
// a success found there stands, and the node does not run again; an
// attempt still running is killed before the node runs again.
func TestRetrySettlesAnAttemptOfTheEarlierGeneration(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning})
	h.orphan("n", &hostexec.Result{ExitCode: 0})
	h.orphan("m", nil)
	d := dispatch(dag.OpCreate, 2, node("n", "quick", 1), node("m", "again", 1, "n"))
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	wantStored(t, h, "f running",
		"n succeeded 1: already recorded succeeded: attempt 1 of generation 1 ended on the host while no executor followed it",
		"m running 2", "m succeeded 2", "f succeeded")
	if ran := h.host.scripts(); !slices.Equal(ran, []string{"again"}) {
		t.Fatalf("ran %q, want only m's command, once", ran)
	}
	if !slices.Equal(h.host.settled, []string{"w1.1.create.f.n.1.run ended 0", "w1.1.create.f.m.1.run killed"}) {
		t.Fatalf("settled %q", h.host.settled)
	}
	if r := h.record(dag.OpCreate, "m"); r.Status != dag.NodeSucceeded || r.Attempt != 2 || r.Generation != 2 {
		t.Fatalf("record of m %+v", r)
	}
}

// A cancel seen on the bus stops a dispatch that arrives before the run
// state says so.
func TestCancelSeenOnTheBusStopsALateDispatch(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning})
	h.x.Cancelled("w1", 1, "operator")
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "ok", 1))); err != nil {
		t.Fatal(err)
	}
	wantStored(t, h, "n cancelled 0: not started: the workflow was cancelled", "f cancelled")
	// The retry's generation runs.
	h.snapshot(events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning})
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 2, node("n", "ok", 1))); err != nil {
		t.Fatal(err)
	}
	wantStored(t, h, "f running", "n running 1", "n succeeded 1", "f succeeded")
}

// A retry's dispatch can arrive before the planner has saved the run
// state of the retry (it publishes, then saves): a run state of the
// earlier generation, cancelled, does not stop it.
func TestRetryDispatchRunsBeforeTheRunStateSaysSo(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowCancelled})
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 2, node("n", "ok", 1))); err != nil {
		t.Fatal(err)
	}
	wantStored(t, h, "f running", "n running 1", "n succeeded 1", "f succeeded")
}

// A cancel this executor did not see on the bus (its connection was down
// while the planner published it) still stops the formula it runs: the
// run state says so, and a running formula reads it again every
// runStateCheck. The node running is killed, and the next one never
// starts.
func TestCancelMissedOnTheBusStillStopsTheFormula(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning})
	done := make(chan error, 1)
	go func() {
		done <- h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "block-n", 1), node("m", "after", 1, "n")))
	}()
	<-h.host.start
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning, Cancelling: true})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the formula ran on after its workflow was cancelled (the cancel was not seen on the bus)")
	}
	if ran := h.host.scripts(); slices.Contains(ran, "after") {
		t.Fatalf("a node started after the cancel: ran %q", ran)
	}
	if r := h.record(dag.OpCreate, "n"); r.Status != dag.NodeCancelled {
		t.Fatalf("record of the node killed: %+v, want cancelled", r)
	}
}
