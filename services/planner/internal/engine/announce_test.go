package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// beforePut runs a hook before each write of a workflow record, outside
// the bucket's lock, so another replica can act in between: what happens
// when two replicas' units meet at the record.
type beforePut struct {
	*eventbustest.MemoryBucket[Record]
	hook func()
}

func (b *beforePut) Put(ctx context.Context, key string, v Record, rev uint64) (uint64, error) {
	if h := b.hook; h != nil {
		b.hook = nil
		h()
	}
	return b.MemoryBucket.Put(ctx, key, v, rev)
}

// workflowStatuses are the workflow events stored, in order ("running
// (cancelling)" for the cancel's announcement).
func (h *harness) workflowStatuses() []string {
	var out []string
	for _, e := range h.out.Stored() {
		if w, ok := e.Payload.(*events.WorkflowEvent); ok {
			s := string(w.Status)
			if w.Cancelling {
				s += " (cancelling)"
			}
			out = append(out, s)
		}
	}
	return out
}

// cannotStore has the outbox fail to store workflow events of status st
// (NATS down, or the planner stopping), with the error it returns.
func (h *harness) cannotStore(st dag.WorkflowState) error {
	down := errors.New("cannot store " + string(st) + ": NATS down")
	h.out.Fail = func(e eventbustest.Emitted) error {
		if w, ok := e.Payload.(*events.WorkflowEvent); ok && w.Status == st {
			return down
		}
		return nil
	}
	return down
}

func finals(statuses []string) []string {
	return slices.DeleteFunc(slices.Clone(statuses), func(s string) bool { return !dag.WorkflowState(s).Terminal() })
}

// One replica steps a run's last formula to its end while the other
// cancels it, and the cancel's record write comes first. The stream must
// end the run once, cancelled, as its record does. Before, the step
// published "succeeded" before it wrote the record, lost the write, and
// its redelivery ended the run cancelled: the stream said succeeded, then
// cancelled, for one run, and a success that did not happen was reported.
func TestACancelThatWinsTheRecordLeavesNoSuccessInTheStream(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	stepper := h.replica()
	hooked := &beforePut{MemoryBucket: h.workflows}
	stepper.Workflows = hooked
	canceller := h.e
	hooked.hook = func() {
		if _, err := canceller.Control(context.Background(), h.id, events.VerbCancel, operator); err != nil {
			t.Errorf("the cancel: %v", err)
		}
	}
	ev := h.event(&events.FormulaEvent{Ref: h.ref("b", 1), Status: dag.FormulaSucceeded})
	if err := stepper.Handle(context.Background(), ev); !errors.Is(err, events.ErrChanged) {
		t.Fatalf("the step that lost the record: %v, want it redelivered (changed underneath)", err)
	}
	ev.Delivered = 2
	if err := stepper.Handle(context.Background(), ev); err != nil {
		t.Fatalf("the redelivered step: %v", err)
	}
	got := h.workflowStatuses()
	if f := finals(got); !slices.Equal(f, []string{"cancelled"}) {
		t.Errorf("the stream ends the run as %q (all: %q), want once, cancelled", f, got)
	}
	if st := h.status(); st != dag.WorkflowCancelled {
		t.Errorf("record %s, want cancelled", st)
	}
	rec, _, _ := h.workflows.Get(context.Background(), h.id)
	if len(rec.Announce) != 0 {
		t.Errorf("the record still announces %d event(s)", len(rec.Announce))
	}
}

// The other way round: the step writes the record first, so the cancel
// finds the run succeeded and is refused. Nothing of the refused cancel
// may be in the stream. Before, its "cancelling" was published before
// its record write lost, and executors killed on it.
func TestARefusedCancelLeavesNothingInTheStream(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	stepper := h.replica()
	canceller := h.replica()
	hooked := &beforePut{MemoryBucket: h.workflows}
	canceller.Workflows = hooked
	hooked.hook = func() {
		ev := h.event(&events.FormulaEvent{Ref: h.ref("b", 1), Status: dag.FormulaSucceeded})
		if err := stepper.Handle(context.Background(), ev); err != nil {
			t.Errorf("the step: %v", err)
		}
	}
	_, err := canceller.Control(context.Background(), h.id, events.VerbCancel, operator)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "already succeeded") {
		t.Fatalf("the cancel: %v, want refused: already succeeded", err)
	}
	if got := h.workflowStatuses(); slices.Contains(got, "running (cancelling)") || !slices.Equal(finals(got), []string{"succeeded"}) {
		t.Errorf("the stream: %q, want the run's end, succeeded, and no cancel", got)
	}
}

// A planner that stops after it wrote a record, before the events the
// record announces were stored: the next planner to load the run
// publishes them, once, and clears them.
func TestAnnouncedEventsAreNotLostWhenThePlannerStops(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	stop := h.cannotStore(dag.WorkflowSucceeded)
	if err := h.formula("b", 1, dag.FormulaSucceeded); !errors.Is(err, stop) {
		t.Fatalf("the step: %v, want it stopped", err)
	}
	h.out.Fail = nil
	if got := finals(h.workflowStatuses()); len(got) != 0 {
		t.Fatalf("stored %q while the planner stopped", got)
	}
	h.fresh()
	if err := h.control(events.VerbPause); !errors.Is(err, ErrConflict) {
		t.Fatalf("a pause of the finished run: %v, want refused", err)
	}
	if got := finals(h.workflowStatuses()); !slices.Equal(got, []string{"succeeded"}) {
		t.Errorf("the stream ends the run as %q, want succeeded, once", got)
	}
	h.fresh()
	if err := h.control(events.VerbPause); !errors.Is(err, ErrConflict) {
		t.Fatalf("a second pause: %v", err)
	}
	if got := finals(h.workflowStatuses()); !slices.Equal(got, []string{"succeeded"}) {
		t.Errorf("after another load the stream ends the run as %q, want succeeded, once", got)
	}
	rec, _, _ := h.workflows.Get(context.Background(), h.id)
	if len(rec.Announce) != 0 {
		t.Errorf("the record still announces %d event(s)", len(rec.Announce))
	}
}
