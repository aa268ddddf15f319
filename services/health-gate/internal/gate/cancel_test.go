package gate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// hanging is a check that runs until it is stopped.
type hanging struct {
	started chan struct{}
	stopped chan struct{}
}

func (h *hanging) Run(ctx context.Context, _ hostexec.Command) (hostexec.Result, error) {
	close(h.started)
	<-ctx.Done()
	close(h.stopped)
	return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: %w", hostexec.ErrCancelled, ctx.Err())
}

// A cancel of the workflow stops its gate's check (the command is stopped,
// not left to its timeout) and the gate ends without a verdict (the run is
// over: a "fail" after it showed on the cancelled formula); a gate of that
// generation delivered after the cancel is not checked; a retry's (the
// next generation) is.
func TestACancelStopsTheWorkflowsGates(t *testing.T) {
	t.Parallel()
	out := &eventbustest.MemoryOutbox{}
	h := &hanging{started: make(chan struct{}), stopped: make(chan struct{})}
	ck := &Checker{Hosts: runners{r: h}, Pub: out, Log: discard}
	done := make(chan error, 1)
	go func() { done <- ck.Run(context.Background(), request(time.Minute, 1)) }()
	<-h.started
	ck.WorkflowCancelled("w1", 1, time.Now())
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a gate stopped by a cancel: %v, want none (no redelivery)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gate is still being checked 10 s after its workflow was cancelled")
	}
	select {
	case <-h.stopped:
	default:
		t.Error("the check was not stopped")
	}
	if got := describe(out); len(got) != 0 {
		t.Errorf("a cancelled gate published %q", got)
	}

	later := &probe{exits: []int{0}}
	ck.Hosts = runners{r: later}
	if err := ck.Run(context.Background(), request(time.Minute, 1)); err != nil || later.calls != 0 {
		t.Errorf("a gate delivered after the cancel: %v, checked %d times, want none", err, later.calls)
	}
	retried := request(time.Minute, 1)
	retried.Generation = 2
	if err := ck.Run(context.Background(), retried); err != nil || later.calls != 1 {
		t.Errorf("a retry's gate: %v, checked %d times, want once", err, later.calls)
	}
}
