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
