package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// rechecking is a MemoryOutbox that remembers, for each event emitted, since
// when it was to be looked for in its stream before being sent (zero: not).
type rechecking struct {
	*eventbustest.MemoryOutbox
	since   time.Time
	emitted []time.Time
}

func (r *rechecking) Recheck(since time.Time) { r.since = since }

func (r *rechecking) Emit(ctx context.Context, subject string, pl events.Payload, msgID string) {
	r.emitted = append(r.emitted, r.since)
	r.MemoryOutbox.Emit(ctx, subject, pl, msgID)
}

// What the planner decides on an event delivered again may have been
// stored by the unit that failed on it, longer ago than the event
// stream's duplicate window: those decisions are looked for in the stream
// before they are sent (since the event was published), and only those.
func TestDecisionsOnARedeliveredEventAreLookedFor(t *testing.T) {
	for _, delivered := range []uint64{1, 2} {
		h := newHarness(t)
		rc := &rechecking{MemoryOutbox: h.out}
		h.e.Out = rc
		if err := h.submit(chain); err != nil {
			t.Fatal(err)
		}
		rc.emitted = nil
		ev := h.event(&events.FormulaEvent{Ref: h.ref("a", 1), Status: dag.FormulaSucceeded})
		ev.Delivered = delivered
		if err := h.e.Handle(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		want := time.Time{}
		if delivered > 1 {
			want = ev.Time
		}
		if len(rc.emitted) == 0 {
			t.Fatalf("delivery %d: nothing decided", delivered)
		}
		for i, since := range rc.emitted {
			if !since.Equal(want) {
				t.Errorf("delivery %d: event %d looked for since %v, want %v", delivered, i, since, want)
			}
		}
		if !rc.since.IsZero() {
			t.Errorf("delivery %d: events of later units looked for since %v", delivered, rc.since)
		}
	}
}

// The accepted event a planner publishes again (its submission did not
// see it stored) may have been stored all the same, maybe longer ago than
// the duplicate window: it is looked for since the workflow was created,
// and what the run does next is not.
func TestAcceptedEventPublishedAgainIsLookedFor(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	rc := &rechecking{MemoryOutbox: h.out}
	h.e.Out = rc
	h.out.Fail = func(eventbustest.Emitted) error { return storageFull(events.StreamEvents) }
	reply, err := h.e.Submit(context.Background(), []byte(chain), false, operator)
	if err != nil {
		t.Fatal(err)
	}
	h.out.Fail = nil
	rc.emitted = nil
	if err := h.e.Start(context.Background(), reply.WorkflowID); err != nil {
		t.Fatal(err)
	}
	rec, _, err := h.workflows.Get(context.Background(), reply.WorkflowID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rc.emitted) < 2 || !rc.emitted[0].Equal(rec.CreatedAt) {
		t.Fatalf("emitted looked for since %v, want the first (accepted) since %v", rc.emitted, rec.CreatedAt)
	}
	for i, since := range rc.emitted[1:] {
		if !since.IsZero() {
			t.Errorf("event %d after the accepted one looked for since %v, want not", i+1, since)
		}
	}
}
