package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// recheckSpy is the memory outbox that also notes which events were
// emitted while Recheck was off (eventbus.Outbox sends those without
// looking for an earlier copy in the stream).
type recheckSpy struct {
	*eventbustest.MemoryOutbox
	since     time.Time
	unchecked []string
}

func (s *recheckSpy) Recheck(t time.Time) { s.since = t }

func (s *recheckSpy) Emit(ctx context.Context, subject string, pl events.Payload, msgID string) {
	if s.since.IsZero() {
		s.unchecked = append(s.unchecked, describe(eventbustest.Emitted{Payload: pl}))
	}
	s.MemoryOutbox.Emit(ctx, subject, pl, msgID)
}

// A redelivered batch is emitted with Recheck on (HandleBatch): what an
// earlier delivery stored may be older than the duplicate window. A
// record in the batch still announcing events (announceLeft, from load)
// turned Recheck off for the rest of the batch, so a dispatch could be
// stored twice.
func TestAnnouncementsReadBackKeepTheBatchRecheck(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	w1 := h.id
	must(t, h.submit(chain))
	w2 := h.id
	// w2's pause is recorded, its announcement not stored (NATS down).
	down := h.cannotStore(dag.WorkflowPaused)
	if err := h.control(events.VerbPause); !errors.Is(err, down) {
		t.Fatalf("pause: %v", err)
	}
	h.out.Fail = nil
	if rec, _, _ := h.workflows.Get(context.Background(), w2); len(rec.Announce) == 0 {
		t.Fatal("setup: w2's record announces nothing")
	}
	spy := &recheckSpy{MemoryOutbox: h.out}
	e := h.replica()
	e.Out = spy
	ev := func(id string, f string, st dag.FormulaState) *consume.Event {
		h.id = id
		x := h.event(&events.FormulaEvent{Ref: h.ref(f, 1), Status: st})
		x.Delivered = 2 // an earlier delivery of this batch failed
		return x
	}
	batch := []*consume.Event{ev(w2, "a", dag.FormulaRunning), ev(w1, "a", dag.FormulaSucceeded)}
	for i, err := range e.HandleBatch(context.Background(), batch) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if len(spy.unchecked) > 0 {
		t.Errorf("emitted in a redelivered batch without looking for an earlier copy: %q", spy.unchecked)
	}
}

// A retry whose "running" event cannot be stored (NATS down) fails and
// writes nothing: asked again, it runs. A new generation's record is
// written only once its event is stored (saveGeneration); announced by
// the record, it was written at the new generation while the snapshot
// stayed at the old one, and the run was left "running" with nothing
// dispatched, every retry refused.
func TestARetryWhoseEventCannotBeStoredCanBeAskedAgain(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaFailed))
	if st := h.status(); st != dag.WorkflowFailed {
		t.Fatalf("setup: %s", st)
	}
	h.stored()
	down := h.cannotStore(dag.WorkflowRunning)
	if err := h.control(events.VerbRetry); !errors.Is(err, down) {
		t.Fatalf("the retry with NATS down: %v", err)
	}
	h.out.Fail = nil
	rec, _, _ := h.workflows.Get(context.Background(), h.id)
	snap, _, _ := h.runs.Get(context.Background(), h.id)
	t.Logf("after the failed retry: record %s g%d (announce %d), snapshot %s g%d %q",
		rec.Status, rec.Generation, len(rec.Announce), snap.Status, snap.Generation, snap.Formulas)
	// The record is at generation 2, announcing its running: the retry
	// asked again loads it, publishes what it announces and begins the
	// generation; it is refused, the run being running.
	err := h.control(events.VerbRetry)
	got := h.stored()
	t.Logf("second retry: err %v; stored %q; record %s", err, got, h.status())
	if err != nil && !errors.Is(err, ErrConflict) {
		t.Errorf("the retry asked again: %v", err)
	}
	if !slices.Contains(got, "dispatch a create g2") {
		t.Errorf("a not dispatched in generation 2: %q", got)
	}
	if rec, _, _ := h.workflows.Get(context.Background(), h.id); rec.Status != dag.WorkflowRunning || rec.Generation != 2 {
		t.Errorf("record %s g%d, want running g2", rec.Status, rec.Generation)
	}
}

// One replica ends a run; another loads the run between the first's
// record write and its clear (announceLeft). Each publishes the end
// (stored once), but only the one whose write ended the run counts it:
// the metric of workflow outcomes, summed over the replicas, counted one
// run twice.
func TestAnEndIsCountedOnceAcrossReplicas(t *testing.T) {
	count := func() float64 {
		return testutil.ToFloat64(workflowResults.WithLabelValues(string(dag.WorkflowSucceeded)))
	}
	before := count()
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	stepper := h.replica()
	loader := h.replica()
	hooked := &beforePut{MemoryBucket: h.workflows}
	stepper.Workflows = hooked
	puts := 0
	var hook func()
	hook = func() {
		puts++
		if puts < 2 { // the clear write is the step's second
			hooked.hook = hook
			return
		}
		// the other replica loads the run (a late event of it)
		ev := h.event(&events.FormulaEvent{Ref: h.ref("a", 1), Status: dag.FormulaSucceeded})
		if err := loader.Handle(context.Background(), ev); err != nil {
			t.Errorf("the other replica: %v", err)
		}
	}
	hooked.hook = hook
	ev := h.event(&events.FormulaEvent{Ref: h.ref("b", 1), Status: dag.FormulaSucceeded})
	if err := stepper.Handle(context.Background(), ev); err != nil {
		t.Logf("the step: %v; redelivered", err)
		ev.Delivered = 2
		if err := stepper.Handle(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("workflow events: %q", h.workflowStatuses())
	if st := h.status(); st != dag.WorkflowSucceeded {
		t.Fatalf("record %s", st)
	}
	if d := count() - before; d != 1 {
		t.Errorf("succeeded workflows +%g for one run, want +1", d)
	}
}

// A pause whose "paused" event cannot be stored answers an error, and
// leaves its record paused while the run snapshot (what the executors
// read before each node) still says running. The operator's second pause
// is answered "is paused", and the snapshot it repaired on its load is
// saved: the pause holds. Before, a refused request's unit failed, and
// the repaired snapshot was not saved.
func TestAPauseWhoseEventCannotBeStoredStillHolds(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	down := h.cannotStore(dag.WorkflowPaused)
	if err := h.control(events.VerbPause); !errors.Is(err, down) {
		t.Fatalf("the pause with NATS down: %v", err)
	}
	h.out.Fail = nil
	err := h.control(events.VerbPause)
	snap, _, _ := h.runs.Get(context.Background(), h.id)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "is paused") {
		t.Errorf("the pause asked again: %v, want: is paused", err)
	}
	if snap.Status != dag.WorkflowPaused {
		t.Errorf("the executors read %s after the operator's second pause", snap.Status)
	}
	if got := h.workflowStatuses(); !slices.Equal(got, []string{"accepted", "running", "paused"}) {
		t.Errorf("the stream: %q", got)
	}
}
