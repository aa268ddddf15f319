package slots_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
	"github.com/gantry-dev/gantry/services/executor/internal/slots/slotstest"
)

// downFirst is a store whose watch cannot start the first times (the bus
// down when the executor first needs a slot).
type downFirst struct {
	*slotstest.Memory
	fails atomic.Int32
}

func (d *downFirst) Watch(ctx context.Context) (<-chan slots.Change, error) {
	if d.fails.Add(-1) >= 0 {
		return nil, errors.New("nats: connection reconnecting")
	}
	return d.Memory.Watch(ctx)
}

// TestSlotsComeBackWithTheBus: the first Acquire found the bus down and
// failed; the executor's attempts then failed for as long as it ran (the
// watch was started once, and its error kept), though the bus came back.
// Now the next Acquire starts the watch again.
func TestSlotsComeBackWithTheBus(t *testing.T) {
	s := &downFirst{Memory: newStore(t, time.Second)}
	s.fails.Store(2)
	m := manager(s, "a", time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := slots.Request{Limits: []dag.SlotLimit{{ID: "h-1", Name: "host 1", MaxParallel: 1}}, Attempt: "1"}
	for i := range 2 {
		if _, err := m.Acquire(ctx, r); err == nil {
			t.Fatalf("Acquire %d with the bus down: no error", i)
		}
	}
	l, err := m.Acquire(ctx, r)
	if err != nil {
		t.Fatalf("Acquire once the bus is back: %v", err)
	}
	l.Release()
}
