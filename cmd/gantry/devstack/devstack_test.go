package devstack_test

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/devstack"
	"github.com/gantry-dev/gantry/cmd/gantry/devstack/devstacktest"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
)

// A stop asked for while the services start (creating their streams,
// buckets and consumers) is a stop: Run returns nil, as it does for one
// asked for later. Before, it returned "executor: kv bucket gantry_slots:
// context canceled", which failed a test that ended before the executor
// had started.
func TestStopWhileStartingIsNoFailure(t *testing.T) {
	cfg := devstacktest.Config(natstest.Start(t))
	run := map[string]func(context.Context) error{
		"Run": func(ctx context.Context) error { return devstack.Run(ctx, cfg) },
		"RunExecutor": func(ctx context.Context) error {
			return devstack.RunExecutor(ctx, cfg, devstack.ExecutorOptions{Name: "b"})
		},
		"RunPlanner": func(ctx context.Context) error { return devstack.RunPlanner(ctx, cfg, "b") },
	}
	for name, run := range run {
		for _, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
			ctx, cancel := context.WithCancel(context.Background())
			stop := time.AfterFunc(after, cancel)
			done := make(chan error, 1)
			go func() { done <- run(ctx) }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s stopped %s after its start: %v", name, after, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not stop within 30s of a stop %s after its start", name, after)
			}
			stop.Stop()
			cancel()
		}
	}
}
