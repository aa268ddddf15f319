package formula

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A cancelled workflow's running node is killed on the host, and what has
// not started is cancelled, not run; each says why: who asked, or the
// composition's timeout (no one asked: it said "cancelled by request").
func TestCancelKillsRunningNodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		stop func(*harness)
		why  string
	}{
		{func(h *harness) { h.x.Cancelled("w1", 1, "operator") }, "cancelled by operator"}, // as the cancel event names who asked
		{func(h *harness) { h.x.DeadlinePassed("w1", 1) }, "cancelled: the composition's timeout passed"},
	} {
		cancelKillsRunningNodes(t, c.stop, c.why)
	}
}

func cancelKillsRunningNodes(t *testing.T, stop func(*harness), why string) {
	h := newHarness()
	d := dispatch(dag.OpCreate, 1, node("n", "block", 3), node("m", "ok", 1, "n"))
	done := make(chan error, 1)
	go func() { done <- h.x.Run(context.Background(), d) }()
	select {
	case <-h.host.start:
	case <-time.After(10 * time.Second):
		t.Fatal("the node never started")
	}
	stop(h)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the formula did not end after the cancel")
	}
	// why is said once: no "cancelled: cancelled: ... context canceled"
	want := []string{"f running", "n running 1", "n cancelled 1: " + why + ": killed on the host", "m blocked 0", "f cancelled"}
	if got := h.stored(); !slices.Equal(got, want) {
		t.Fatalf("stored\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if r := h.record(dag.OpCreate, "n"); r.Status != dag.NodeCancelled || r.GenAttempts != 1 {
		t.Fatalf("record %+v", r)
	}
}

// A cancelled node whose kill on the host was not confirmed is not said
// to have been killed there.
func TestCancelUnconfirmedKillNotReportedKilled(t *testing.T) {
	t.Parallel()
	h := newHarness()
	d := dispatch(dag.OpCreate, 1, node("n", "blockunkillable", 3))
	done := make(chan error, 1)
	go func() { done <- h.x.Run(context.Background(), d) }()
	select {
	case <-h.host.start:
	case <-time.After(10 * time.Second):
		t.Fatal("the node never started")
	}
	h.x.CancelWorkflow("w1")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the formula did not end after the cancel")
	}
	want := "n cancelled 1: cancelled by request: its kill on the host was not confirmed, it may still run there cancelled: context canceled\nkill not confirmed: still running"
	if got := h.stored(); !slices.Contains(got, want) {
		t.Fatalf("stored\n  %s\nwant among them\n  %s", strings.Join(got, "\n  "), want)
	}
}

// An outcome that cannot be recorded is not announced: the dispatch is
// delivered again, and decides from the records.
func TestUnrecordedOutcomeIsRedelivered(t *testing.T) {
	t.Parallel()
	h := newHarness()
	down := errors.New("kv down")
	writes := 0
	h.records.Fail = func(op, key string) error {
		if op == "put" {
			if writes++; writes == 2 { // the outcome, after the attempt's record
				return down
			}
		}
		return nil
	}
	d := dispatch(dag.OpCreate, 1, node("n", "ok", 1))
	if err := h.x.Run(context.Background(), d); !errors.Is(err, down) {
		t.Fatalf("err %v, want the write failure", err)
	}
	if got := h.stored(); slices.Contains(got, "f succeeded") || slices.Contains(got, "n succeeded 1") {
		t.Fatalf("an unrecorded outcome was announced: %q", got)
	}
	// The redelivery finds the attempt recorded running, re-attaches to it
	// on the host and reads its result.
	h.records.Fail = nil
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	got := h.stored()
	if got[len(got)-1] != "f succeeded" {
		t.Fatalf("stored %q", got)
	}
	if ran := h.host.scripts(); len(ran) != 1 {
		t.Fatalf("ran %q: the command ran again", ran)
	}
}

// A run state that cannot be read is not a run that goes on: the dispatch
// comes back later.
func TestUnreadableRunStateIsRedelivered(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.runs.Fail = func(op, key string) error { return errors.New("timeout") }
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "ok", 1))); err == nil || !strings.Contains(err.Error(), "run state of w1") {
		t.Fatalf("err %v", err)
	}
	if ran := h.host.scripts(); len(ran) != 0 || len(h.stored()) != 0 {
		t.Fatalf("ran %q, stored %q", ran, h.stored())
	}
}

// Output lines go out as they are printed, with the node and attempt.
func TestOutputLinesFired(t *testing.T) {
	t.Parallel()
	h := newHarness()
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "ok", 1), node("m", "ok2", 1, "n"))); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.bus.lines, []string{"ran ok", "ran ok2"}) {
		t.Fatalf("lines %q", h.bus.lines)
	}
}

// No more nodes run at once on a host than PerHost, across formulas.
func TestPerHostLimit(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.x.PerHost = 1
	d1 := dispatch(dag.OpCreate, 1, node("n", "block-w1", 1))
	d2 := dispatch(dag.OpCreate, 1, node("n", "block-w2", 1))
	d2.Formula, d2.WorkflowID = "g", "w2"
	go func() { _ = h.x.Run(context.Background(), d1) }()
	go func() { _ = h.x.Run(context.Background(), d2) }()
	first := <-h.host.start
	select {
	case <-h.host.start:
		t.Fatal("two nodes ran at once with a per-host limit of 1")
	case <-time.After(200 * time.Millisecond):
	}
	h.x.CancelWorkflow(strings.TrimPrefix(first, "block-"))
	select {
	case second := <-h.host.start: // the other starts once the first is gone
		h.x.CancelWorkflow(strings.TrimPrefix(second, "block-"))
	case <-time.After(10 * time.Second):
		t.Fatal("the second node never started")
	}
}

// A dispatch of a workflow whose run snapshot is gone (pruned after it
// ended, the dispatch still queued) runs nothing and says nothing.
func TestDispatchOfAPrunedWorkflowRunsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness()
	d := dispatch(dag.OpCreate, 1, node("n", "ok", 1))
	d.WorkflowID = "pruned"
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if got := h.host.scripts(); len(got) != 0 {
		t.Errorf("ran %v", got)
	}
	if got := h.stored(); len(got) != 0 {
		t.Errorf("published %v", got)
	}
}

// laggingRuns is a replica behind the others: it holds no run state, while
// the leader (the memory bucket under it) does.
type laggingRuns struct {
	*eventbustest.MemoryBucket[events.RunSnapshot]
}

func (laggingRuns) Get(context.Context, string) (events.RunSnapshot, uint64, error) {
	return events.RunSnapshot{}, 0, events.ErrNoRecord
}

// A run state that the replica read does not hold (cut off in a partition
// since before the run began) is no proof that the workflow was pruned:
// the dispatch runs nothing yet and comes back later, rather than being
// dropped, which would leave its nodes undone for good.
func TestDispatchReadFromALaggingReplicaComesBack(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.x.Runs = laggingRuns{h.runs}
	d := dispatch(dag.OpCreate, 1, node("n", "ok", 1))
	err := h.x.Run(context.Background(), d)
	if err == nil || !strings.Contains(err.Error(), "a replica behind") {
		t.Fatalf("the dispatch was dropped (err %v): it must come back", err)
	}
	if got := h.host.scripts(); len(got) != 0 {
		t.Errorf("ran %v", got)
	}
	h.x.Runs = h.runs // the replica caught up
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if got := h.host.scripts(); len(got) != 1 {
		t.Errorf("ran %v; want the node once", got)
	}
}
