package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A new generation (a retry, a rollback) writes its workflow record, then
// dispatches and writes the run snapshot. A planner that stops in between
// (NATS down for the dispatch, a crash) left the record at the new
// generation and the snapshot at the old: before, the run stayed running
// with nothing dispatched, every retry refused ("running"), and after a
// rollback every load failed (the snapshot's formulas are the create
// plan's). Each test fails on the code before.

// cannotDispatch has the outbox fail to store dispatches (the planner
// stopping right after the record's write).
func (h *harness) cannotDispatch() error {
	down := errors.New("cannot store a dispatch: NATS down")
	h.out.Fail = func(e eventbustest.Emitted) error {
		if _, ok := e.Payload.(*events.Dispatch); ok {
			return down
		}
		return nil
	}
	return down
}

// restart is the planner after a restart (fresh) resuming its runs.
func (h *harness) restart() { h.restartWith(h.out) }

// restartWith is restart with the outbox out.
func (h *harness) restartWith(out Emitter) {
	h.t.Helper()
	h.fresh()
	h.e.Out = out
	if failed, err := h.e.Resume(context.Background()); err != nil || len(failed) > 0 {
		h.t.Fatalf("resume: %v %v", failed, err)
	}
}

// leftBehind does act, which begins a new generation, with its dispatches
// not stored (the planner stopping right after the record's write): act
// fails, and the outbox stores again after it.
func (h *harness) leftBehind(act func() error) {
	h.t.Helper()
	down := h.cannotDispatch()
	if err := act(); !errors.Is(err, down) {
		h.t.Fatalf("with NATS down for its dispatches: %v, want %v", err, down)
	}
	h.out.Fail = nil
}

// retryLeftBehind is chain's a failed and retried, the retry left behind.
func retryLeftBehind(t *testing.T) *harness {
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaFailed))
	h.stored()
	h.leftBehind(func() error { return h.control(events.VerbRetry) })
	return h
}

// rollbackLeftBehind is rollback's b failed after a succeeded, the
// rollback's start left behind.
func rollbackLeftBehind(t *testing.T) *harness {
	h := newHarness(t)
	must(t, h.submit(rollback))
	h.recordNode(dag.OpCreate, "a", "x", dag.NodeSucceeded)
	h.recordNode(dag.OpCreate, "a", "keep", dag.NodeSucceeded)
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	h.recordNode(dag.OpCreate, "b", "y", dag.NodeFailed)
	h.stored()
	h.leftBehind(func() error { return h.formula("b", 1, dag.FormulaFailed) })
	return h
}

// generations are the generations of the run's record and snapshot.
func (h *harness) generations() (record, snapshot int) {
	rec, _, err := h.workflows.Get(context.Background(), h.id)
	must(h.t, err)
	snap, _, err := h.runs.Get(context.Background(), h.id)
	must(h.t, err)
	return rec.Generation, snap.Generation
}

func wantGeneration(t *testing.T, h *harness, gen int, st dag.WorkflowState) {
	t.Helper()
	rec, snap := h.generations()
	if rec != gen || snap != gen || h.status() != st {
		t.Errorf("record g%d %s, snapshot g%d; want both g%d, %s", rec, h.status(), snap, gen, st)
	}
}

func TestARetryWhoseDispatchWasNotStoredStartsWhenAskedAgain(t *testing.T) {
	h := retryLeftBehind(t)
	// The retry asked again finds the run running, begun again on load
	// ("only a failed or cancelled workflow can be retried").
	err := h.control(events.VerbRetry)
	if err != nil && !errors.Is(err, ErrConflict) {
		t.Fatalf("the retry asked again: %v", err)
	}
	if got := h.stored(); !slices.Contains(got, "dispatch a create g2") {
		t.Fatalf("a not dispatched in generation 2: %q", got)
	}
	wantGeneration(t, h, 2, dag.WorkflowRunning)
	must(t, h.formula("a", 2, dag.FormulaSucceeded))
	must(t, h.formula("b", 2, dag.FormulaSucceeded))
	if st := h.status(); st != dag.WorkflowSucceeded {
		t.Errorf("the retried run ended %s, want succeeded", st)
	}
}

func TestARetryLeftBehindItsRecordStartsWhenThePlannerStarts(t *testing.T) {
	h := retryLeftBehind(t)
	h.restart()
	if got := h.stored(); !slices.Contains(got, "dispatch a create g2") {
		t.Fatalf("a not dispatched in generation 2: %q", got)
	}
	wantGeneration(t, h, 2, dag.WorkflowRunning)
}

func TestARollbackLeftBehindItsRecordStartsWhenThePlannerStarts(t *testing.T) {
	h := rollbackLeftBehind(t)
	h.restart()
	if got := h.stored(); !slices.Contains(got, "dispatch a delete g2") {
		t.Fatalf("the rollback's a not dispatched: %q", got)
	}
	wantGeneration(t, h, 2, dag.WorkflowRunning)
	h.recordNode(dag.OpDelete, "a", "x", dag.NodeSucceeded)
	must(t, h.formula("a", 2, dag.FormulaSucceeded))
	wantStored(t, h, "workflow failed: formula b failed; rolled back: 1 of 1 succeeded nodes deleted")
}

// A retry of one node of two failures: what it re-runs comes from the
// node records and the names asked for, which the snapshot of the
// generation before does not hold. Begun again, the generation is as the
// retry would have begun it.
func TestARetryOfNodesLeftBehindItsRecordRerunsOnlyThem(t *testing.T) {
	want := newHarness(t)
	failBoth(t, want, "x")
	must(t, want.retryNodes("a/x"))
	h := newHarness(t)
	failBoth(t, h, "x")
	h.leftBehind(func() error { return h.retryNodes("a/x") })
	h.restart()
	got, wantGot := h.stored(), want.stored()
	if !slices.Equal(got, wantGot) {
		t.Errorf("stored %q, want %q as the retry stores", got, wantGot)
	}
	wantGeneration(t, h, 2, dag.WorkflowRunning)
	if s, w := h.snapshot(), want.snapshot(); s != w {
		t.Errorf("snapshot %q, want %q as the retry leaves it", s, w)
	}
	must(t, h.formula("a", 2, dag.FormulaSucceeded))
	must(t, h.formula("c", 2, dag.FormulaSucceeded))
	must(t, h.formula("e", 2, dag.FormulaSucceeded))
	if st := h.status(); st != dag.WorkflowFailed {
		t.Errorf("status %s, want failed (b's failure carried)", st)
	}
}

// runsBetween runs between before the first write of a generation-2 run
// snapshot.
type runsBetween struct {
	*eventbustest.MemoryBucket[Snapshot]
	between func()
}

func (b *runsBetween) Put(ctx context.Context, key string, v Snapshot, rev uint64) (uint64, error) {
	if f := b.between; f != nil && v.Generation == 2 {
		b.between = nil
		f()
	}
	return b.MemoryBucket.Put(ctx, key, v, rev)
}

// Another planner replica loads the run between the retry's record write
// and its snapshot write (its start, an event of the run), and begins the
// generation itself. The retry loses its snapshot write; it happened all
// the same, and is answered so, not with the lost write's error (a
// retry's loss was not finished, as a pause's is).
func TestARetryWhoseSnapshotAnotherReplicaWroteIsAnsweredDone(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaFailed))
	other := h.replica()
	runs := &runsBetween{MemoryBucket: h.runs}
	runs.between = func() {
		if failed, err := other.Resume(context.Background()); err != nil || len(failed) > 0 {
			t.Errorf("the other replica's start: %v %v", failed, err)
		}
	}
	h.e.Runs = runs
	h.stored()
	if err := h.control(events.VerbRetry); err != nil {
		t.Errorf("the retry answered %v, though it started generation 2", err)
	}
	wantGeneration(t, h, 2, dag.WorkflowRunning)
	if got := h.stored(); !slices.Contains(got, "dispatch a create g2") {
		t.Errorf("a not dispatched in generation 2: %q", got)
	}
}

// A new generation's "running" goes out once the record that begins it is
// written, as every workflow event does (Record.Announce). Before, a
// retry's or a rollback's was stored first: a record write lost to
// another replica, or failed, left the stream with a generation that
// never began, which the state-store shows for good (it ignores what an
// older generation says after it).

// The retry's record write fails (NATS gone after the event's flush): the
// stream must not say the run is running again.
func TestARetryWhoseRecordCannotBeWrittenLeavesNoRunningInTheStream(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaFailed))
	h.stored()
	down := errors.New("put: NATS down")
	h.workflows.Fail = func(op, key string) error {
		if op == "put" {
			return down
		}
		return nil
	}
	if err := h.control(events.VerbRetry); !errors.Is(err, down) {
		t.Fatalf("the retry with its record write failing: %v", err)
	}
	h.workflows.Fail = nil
	h.restart()
	st := h.workflowStatuses()
	if last := st[len(st)-1]; last != string(h.status()) || h.status() != dag.WorkflowFailed {
		t.Errorf("the stream ends the run %q (%q), its record %s: a retry that never began is in the stream", last, st, h.status())
	}
}

// Two retries race on two replicas (alice's plain one, bob's of a/x);
// bob's wins the record, alice's is refused. The stream's generation 2
// must be bob's, not alice's (whose event, stored first, made bob's a
// duplicate).
func TestTheRetryThatLosesTheRecordLeavesNothingInTheStream(t *testing.T) {
	h := newHarness(t)
	failBoth(t, h, "x")
	alice := events.Principal{Name: "alice", Attested: true}
	bob := events.Principal{Name: "bob", Attested: true}
	other := h.replica()
	hooked := &beforePut{MemoryBucket: h.workflows}
	h.e.Workflows = hooked
	var bobErr error
	hooked.hook = func() {
		_, bobErr = other.ControlRequest(context.Background(), h.id, events.VerbRetry, events.ControlRequest{Nodes: []string{"a/x"}}, bob)
	}
	_, aliceErr := h.e.ControlRequest(context.Background(), h.id, events.VerbRetry, events.ControlRequest{}, alice)
	if bobErr != nil || !errors.Is(aliceErr, ErrConflict) {
		t.Fatalf("setup: bob %v, alice %v; want bob's retry done and alice's refused", bobErr, aliceErr)
	}
	for _, e := range h.out.Stored() {
		if w, ok := e.Payload.(*events.WorkflowEvent); ok && w.Generation == 2 && (w.RequestedBy == nil || w.RequestedBy.Name != "bob") {
			t.Errorf("the stream says %q (requested by %s) began generation 2; bob's retry of a/x did", w.Reason, w.RequestedBy)
		}
	}
}

// A cancel wins the record over the step that starts a rollback: the
// stream must not say the rollback began.
func TestACancelThatWinsOverARollbackLeavesNoRollbackInTheStream(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(rollback))
	h.recordNode(dag.OpCreate, "a", "x", dag.NodeSucceeded)
	h.recordNode(dag.OpCreate, "a", "keep", dag.NodeSucceeded)
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	must(t, h.formula("b", 1, dag.FormulaRunning))
	h.recordNode(dag.OpCreate, "b", "y", dag.NodeFailed)
	stepper := h.replica()
	hooked := &beforePut{MemoryBucket: h.workflows}
	stepper.Workflows = hooked
	hooked.hook = func() {
		if _, err := h.e.Control(context.Background(), h.id, events.VerbCancel, operator); err != nil {
			t.Errorf("the cancel: %v", err)
		}
	}
	h.stored()
	ev := h.event(&events.FormulaEvent{Ref: h.ref("b", 1), Status: dag.FormulaFailed})
	if err := stepper.Handle(context.Background(), ev); err == nil {
		t.Fatal("the step that lost the record to the cancel succeeded")
	}
	ev.Delivered = 2
	must(t, stepper.Handle(context.Background(), ev))
	rec, _, err := h.workflows.Get(context.Background(), h.id)
	must(t, err)
	for _, e := range h.out.Stored() {
		if w, ok := e.Payload.(*events.WorkflowEvent); ok && w.Generation > rec.Generation {
			t.Errorf("the stream says generation %d %s (%q); the run is %s in generation %d", w.Generation, w.Status, w.Reason, rec.Status, rec.Generation)
		}
	}
}

// What a generation begun again dispatches, the unit that began it may
// have stored, maybe longer ago than the event stream's duplicate window
// (the planner restarted much later): each is looked for in the stream
// first, since the generation began; what later units emit is not.
func TestAGenerationBegunAgainLooksForWhatItDispatches(t *testing.T) {
	h := retryLeftBehind(t)
	rec, _, err := h.workflows.Get(context.Background(), h.id)
	must(t, err)
	rc := &rechecking{MemoryOutbox: h.out}
	h.restartWith(rc)
	if len(rc.emitted) == 0 {
		t.Fatal("nothing dispatched")
	}
	for i, since := range rc.emitted {
		if !since.Equal(rec.Began.At) {
			t.Errorf("event %d looked for since %v, want since the generation began (%v)", i, since, rec.Began.At)
		}
	}
	if !rc.since.IsZero() {
		t.Errorf("later units' events looked for since %v", rc.since)
	}
}

// A generation begun again from a record of an older planner (no time in
// its Began) keeps the recheck of the batch it is in: a zero time turned
// it off.
func TestARecheckFromAnUnknownTimeKeepsTheOneInForce(t *testing.T) {
	e := &Engine{Out: &eventbustest.MemoryOutbox{}}
	outer := time.Now().Add(-time.Hour)
	defer e.recheckFrom(outer)()
	restore := e.recheckFrom(time.Time{})
	if !e.recheck.Equal(outer) {
		t.Errorf("recheck from %v within recheckFrom(zero); want it kept from %v", e.recheck, outer)
	}
	restore()
	if !e.recheck.Equal(outer) {
		t.Errorf("recheck from %v after it; want %v", e.recheck, outer)
	}
}

// forgetBegan has the run's record as a planner before Record.Began wrote
// it.
func (h *harness) forgetBegan() {
	h.t.Helper()
	rec, rev, err := h.workflows.Get(context.Background(), h.id)
	must(h.t, err)
	rec.Began = nil
	_, err = h.workflows.Put(context.Background(), h.id, rec, rev)
	must(h.t, err)
}

// A record left a generation ahead by a planner before Record.Began is
// begun again as that planner began it: a retry runs again what failed, a
// rollback starts its plan afresh. (Without this, each load of it failed
// for good.)
func TestAGenerationLeftByAnOlderPlannerIsBegunAgain(t *testing.T) {
	t.Run("retry", func(t *testing.T) {
		h := retryLeftBehind(t)
		h.forgetBegan()
		h.restart()
		if got := h.stored(); !slices.Contains(got, "dispatch a create g2") {
			t.Fatalf("a not dispatched in generation 2: %q", got)
		}
		wantGeneration(t, h, 2, dag.WorkflowRunning)
	})
	t.Run("rollback", func(t *testing.T) {
		h := rollbackLeftBehind(t)
		h.forgetBegan()
		h.restart()
		if got := h.stored(); !slices.Contains(got, "dispatch a delete g2") {
			t.Fatalf("the rollback's a not dispatched: %q", got)
		}
		wantGeneration(t, h, 2, dag.WorkflowRunning)
	})
}

// A retry by a planner before Record.Began that stopped with its record
// still announcing its running: loading it publishes that (and rewrites
// the record) before the generation's dispatches are looked for, which is
// from when the retry began, not from the restart's own write.
func TestAGenerationLeftByAnOlderPlannerIsLookedForFromItsBeginning(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaFailed))
	down := errors.New("NATS down")
	h.out.Fail = func(e eventbustest.Emitted) error {
		switch e.Payload.(type) {
		case *events.Dispatch, *events.WorkflowEvent:
			return down
		}
		return nil
	}
	if err := h.control(events.VerbRetry); err == nil {
		t.Fatal("the retry with NATS down succeeded")
	}
	h.out.Fail = nil
	h.forgetBegan()
	rec, _, err := h.workflows.Get(context.Background(), h.id)
	must(t, err)
	if len(rec.Announce) == 0 || rec.Generation != 2 {
		t.Fatalf("setup: record g%d announcing %d", rec.Generation, len(rec.Announce))
	}
	h.e.Now = func() time.Time { return rec.UpdatedAt.Add(time.Hour) } // restarted an hour later
	rc := &rechecking{MemoryOutbox: h.out}
	h.restartWith(rc)
	if got := h.stored(); !slices.Contains(got, "dispatch a create g2") {
		t.Fatalf("a not dispatched in generation 2: %q", got)
	}
	for i, since := range rc.emitted {
		if !since.Equal(rec.UpdatedAt) {
			t.Errorf("event %d looked for since %v, want since the retry began (%v)", i, since, rec.UpdatedAt)
		}
	}
}

// twoFailuresAndLate is twoFailures with g, which ends after a and b
// failed, and f on g, cancelled then (on_failure: stop).
const twoFailuresAndLate = twoFailures + `  - id: g
    server: h1
    nodes: [{name: s, run: "true"}]
  - id: f
    server: h1
    depends_on: [g]
    nodes: [{name: r, run: "true"}]
`

// A retry of a/x (b's failure carried) by a planner before Record.Began is
// begun again as dag.RetryNodes decided it: f, cancelled and not behind
// a, stays as it was. Rerunning what the run left failed, blocked or
// cancelled dispatched f.
func TestARetryOfNodesLeftByAnOlderPlannerRerunsOnlyWhatItNamed(t *testing.T) {
	stored := func(older bool) []string {
		h := newHarness(t)
		must(t, h.submit(twoFailuresAndLate))
		h.recordNode(dag.OpCreate, "a", "x", dag.NodeFailed)
		h.recordNode(dag.OpCreate, "a", "y", dag.NodeSucceeded)
		h.recordNode(dag.OpCreate, "b", "v", dag.NodeFailed)
		must(t, h.formula("a", 1, dag.FormulaFailed))
		must(t, h.formula("b", 1, dag.FormulaFailed))
		must(t, h.formula("g", 1, dag.FormulaSucceeded))
		h.stored()
		h.leftBehind(func() error { return h.retryNodes("a/x") })
		if older {
			h.forgetBegan()
		}
		h.restart()
		return h.stored()
	}
	if with, without := stored(false), stored(true); !slices.Equal(with, without) {
		t.Errorf("begun again with Record.Began: %q\nfrom an older planner's record: %q", with, without)
	}
}
