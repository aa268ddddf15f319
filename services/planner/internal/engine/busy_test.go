package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// stuckOutbox is a MemoryOutbox whose next Flush, once armed, lasts until
// released and then fails naming storage: a unit's flush while JetStream
// does not answer, its publisher trying each event for most of a minute
// (8 tries of PublishTimeout, each after a look-up), while the unit holds
// the planner.
type stuckOutbox struct {
	*eventbustest.MemoryOutbox
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *stuckOutbox) Flush(ctx context.Context) error {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
		return storageFull(events.StreamEvents)
	}
	return s.MemoryOutbox.Flush(ctx)
}

// A submission and a control request are answered within their budget
// (the context the API gives them: eventbus.HandlerContext) while a unit of
// work holds the planner, its events not stored: they waited for the unit
// to end, past the requester's patience, though their answer (an error)
// was all they could give.
func TestRequestsAnsweredWhileAUnitCannotStore(t *testing.T) {
	h := newHarness(t)
	if err := h.submit(chain); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"submit", func(ctx context.Context) error {
			_, err := h.e.Submit(ctx, []byte(chain), false, operator)
			return err
		}},
		{"cancel", func(ctx context.Context) error {
			_, err := h.e.Control(ctx, h.id, events.VerbCancel, operator)
			return err
		}},
	} {
		st := &stuckOutbox{MemoryOutbox: h.out, entered: make(chan struct{}), release: make(chan struct{})}
		h.e.Out = st
		st.armed.Store(true)
		unit := make(chan error, 1)
		go func() { unit <- h.formula("a", 1, dag.FormulaRunning) }()
		<-st.entered
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		began := time.Now()
		answered := make(chan error, 1)
		go func() { answered <- c.do(ctx) }()
		var err error
		select {
		case err = <-answered:
		case <-time.After(3 * time.Second):
		}
		took := time.Since(began)
		close(st.release)
		<-unit
		if took >= 3*time.Second {
			err = <-answered
			cancel()
			t.Fatalf("%s: not answered within 3 s of its 0.3 s budget: it waited for the unit holding the planner (then, after %v: %v)", c.name, time.Since(began).Round(time.Millisecond), err)
		}
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: %v after %v, want its budget's end", c.name, err, took.Round(time.Millisecond))
		}
		t.Logf("%s: answered after %v: %v", c.name, took.Round(time.Millisecond), err)
	}
}
