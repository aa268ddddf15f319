package eventbus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
)

// The four services start at once on an empty server and each creates
// the streams and buckets it uses, some of them the same ones: every one
// must come up (a creation that races another's may be refused by the
// server for a moment; it is tried again).
func TestEnsureRacesOnAnEmptyServer(t *testing.T) {
	t.Parallel()
	for round := 0; round < 8; round++ {
		ns := natstest.Start(t)
		var wg sync.WaitGroup
		for _, id := range []events.Identity{events.Planner, events.Executor, events.HealthGate, events.StateStore} {
			nc := ns.Connect(id)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if _, err := eventbus.Open(ctx, nc, id, 1, nil); err != nil {
					t.Errorf("round %d: %s: %v", round, id, err)
				}
			}()
		}
		wg.Wait()
	}
}
