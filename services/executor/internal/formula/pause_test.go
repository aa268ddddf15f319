package formula

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A workflow paused while a formula's node runs: that node finishes, the
// next one does not start (the formula is held, and says so in the
// status) until the resume; then it runs.
func TestPauseHoldsTheNextNode(t *testing.T) {
	t.Parallel()
	h := newHarness()
	d := dispatch(dag.OpCreate, 1, node("s1", "hold s1", 1), node("s2", "s2", 1, "s1"))
	done := make(chan error, 1)
	go func() { done <- h.x.Run(context.Background(), d) }()
	select {
	case <-h.host.start:
	case <-time.After(10 * time.Second):
		t.Fatal("s1 never started")
	}
	h.runs.Set("w1", events.RunSnapshot{Generation: 1, Status: dag.WorkflowPaused}) // as the planner saves a pause
	close(h.host.release)                                                           // s1 ends
	deadline := time.Now().Add(10 * time.Second)
	for {
		if slices.Contains(h.host.scripts(), "s2") {
			t.Fatalf("s2 started while the workflow was paused: %v", h.host.scripts())
		}
		if held, n := h.x.Held(); n == 1 && held[0].Formula == "f" && held[0].WorkflowID == "w1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the formula is not held by the pause")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if rec := h.record(dag.OpCreate, "s1"); rec.Status != dag.NodeSucceeded {
		t.Fatalf("s1 did not finish while paused: %+v", rec)
	}
	resumeAndWait(t, h, done)
	if got := h.host.scripts(); !slices.Equal(got, []string{"hold s1", "s2"}) {
		t.Fatalf("ran %v", got)
	}
	if _, n := h.x.Held(); n != 0 {
		t.Fatalf("%d formula(s) still held after the resume", n)
	}
}

// A cancel of a paused workflow ends its held formula: what did not start
// is cancelled.
func TestCancelEndsAFormulaHeldByAPause(t *testing.T) {
	t.Parallel()
	h := newHarness()
	d := dispatch(dag.OpCreate, 1, node("s1", "hold s1", 1), node("s2", "s2", 1, "s1"))
	done := make(chan error, 1)
	go func() { done <- h.x.Run(context.Background(), d) }()
	<-h.host.start
	h.runs.Set("w1", events.RunSnapshot{Generation: 1, Status: dag.WorkflowPaused})
	close(h.host.release)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, n := h.x.Held(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the formula is not held by the pause")
		}
	}
	h.x.Cancelled("w1", 1, "operator")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held formula did not end after the cancel")
	}
	if got := h.stored(); !slices.Contains(got, "s2 cancelled 0: cancelled by operator: not started") {
		t.Fatalf("stored %v, want s2 cancelled, not started", got)
	}
	if slices.Contains(h.host.scripts(), "s2") {
		t.Fatal("s2 ran after the cancel")
	}
}

// countingRuns counts the run-state reads.
type countingRuns struct {
	Runs
	gets atomic.Int32
}

func (r *countingRuns) Get(ctx context.Context, id string) (events.RunSnapshot, uint64, error) {
	r.gets.Add(1)
	return r.Runs.Get(ctx, id)
}

// A formula reads its run state once before its first node starts: the
// read when the dispatch comes is the first look for a pause too. Its
// second node looks again.
func TestFirstNodeLooksForAPauseInTheDispatchsRead(t *testing.T) {
	t.Parallel()
	h := newHarness()
	runs := &countingRuns{Runs: h.runs}
	h.x.Runs = runs
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("s1", "s1", 1))); err != nil {
		t.Fatal(err)
	}
	if n := runs.gets.Load(); n != 1 {
		t.Errorf("a formula of one node read its run state %d times, want 1", n)
	}
	runs.gets.Store(0)
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("a", "a", 1), node("b", "b", 1, "a"))); err != nil {
		t.Fatal(err)
	}
	if n := runs.gets.Load(); n != 2 {
		t.Errorf("a formula of two nodes in a row read its run state %d times, want 2 (the dispatch's, then before b)", n)
	}
}

// A pause saved before the dispatch came holds the formula's first node
// (the dispatch's read shows it) until the resume.
func TestPauseBeforeTheDispatchHoldsTheFirstNode(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.runs.Set("w1", events.RunSnapshot{Generation: 1, Status: dag.WorkflowPaused})
	done := make(chan error, 1)
	go func() { done <- h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("s1", "s1", 1))) }()
	heldBeforeAnyStart(t, h)
	resumeAndWait(t, h, done)
	if got := h.host.scripts(); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("ran %v", got)
	}
}

// heldBeforeAnyStart waits until the formula is held by a pause, and
// fails if any of its nodes started first.
func heldBeforeAnyStart(t *testing.T, h *harness) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := h.host.scripts(); len(got) > 0 {
			t.Fatalf("%v started while the workflow was paused", got)
		}
		if _, n := h.x.Held(); n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the formula is not held by the pause")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// resumeAndWait resumes workflow w1 and waits for its formula's run
// (done) to end without error.
func resumeAndWait(t *testing.T, h *harness, done <-chan error) {
	t.Helper()
	h.runs.Set("w1", events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning})
	h.x.Resumed("w1")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the formula did not go on after the resume")
	}
}

// pausingRecords saves a pause (as the planner does, before answering it)
// when the held node's record is read.
type pausingRecords struct {
	Records
	h    *harness
	once sync.Once
}

func (r *pausingRecords) Get(ctx context.Context, key string) (Record, uint64, error) {
	if key == r.h.key(dag.OpCreate, "a") {
		r.once.Do(func() { r.h.runs.Set("w1", events.RunSnapshot{Generation: 1, Status: dag.WorkflowPaused}) })
	}
	return r.Records.Get(ctx, key)
}

// A pause saved after the dispatch's run-state read, while a retry reads
// the record of a node it does not run again, holds the first node to
// start: the first look reads the run state again.
func TestPauseWhileARetryReadsItsRecordsHoldsTheFirstNode(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.x.Records = &pausingRecords{Records: h.records, h: h}
	h.records.Set(h.key(dag.OpCreate, "a"), Record{Status: dag.NodeSucceeded, Attempt: 1})
	a := node("a", "a", 1)
	a.NotRetried = true
	d := dispatch(dag.OpCreate, 1, a, node("b", "b", 1))
	done := make(chan error, 1)
	go func() { done <- h.x.Run(context.Background(), d) }()
	heldBeforeAnyStart(t, h)
	resumeAndWait(t, h, done)
	if got := h.host.scripts(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("ran %v", got)
	}
}
