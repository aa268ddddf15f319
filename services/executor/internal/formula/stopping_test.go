package formula

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// drainingHost is a host whose runner drains (the executor is stopping):
// the scripts named are not started, as hostexec's Pool.Drain does to
// commands still waiting for an SSH session.
type drainingHost struct {
	*host
	drained map[string]bool
}

func (d drainingHost) run(ctx context.Context, cmd hostexec.Attempt, settle bool) (hostexec.Result, error) {
	if d.drained[cmd.Script] {
		return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: the command on h1 was not started", hostexec.ErrDraining)
	}
	return d.host.run(ctx, cmd, settle)
}

// A node whose command the runner did not start because the executor is
// stopping is neither announced running nor failed, and does not count:
// the dispatch is given back (ErrStopping), and its redelivery runs the
// node as its first attempt.
func TestStoppingRunnerStartsNothingMore(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.x.Hosts = runners{r: fake{drainingHost{h.host, map[string]bool{"waits": true}}}}
	d := dispatch(dag.OpCreate, 1, node("n", "ok", 1), node("m", "waits", 3, "n"))
	if err := h.x.Run(context.Background(), d); !errors.Is(err, ErrStopping) || !errors.Is(err, hostexec.ErrDraining) {
		t.Fatalf("err %v, want ErrStopping", err)
	}
	want := []string{"f running", "n running 1", "n succeeded 1"}
	if got := h.stored(); !slices.Equal(got, want) {
		t.Fatalf("stored\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if r := h.record(dag.OpCreate, "m"); r.Status != "" {
		t.Fatalf("m recorded %+v though nothing started", r)
	}
	h.x.Hosts = runners{r: fake{h.host}}
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if r := h.record(dag.OpCreate, "m"); r.Status != dag.NodeSucceeded || r.GenAttempts != 1 {
		t.Fatalf("after the redelivery m is %+v, want succeeded at its first attempt", r)
	}
}

// An attempt waiting for its host's slot when the executor stops stops
// waiting at once (the running node is not affected), and the dispatch is
// given back.
func TestStoppingEndsTheWaitForASlot(t *testing.T) {
	t.Parallel()
	h := newHarness()
	stopping, stop := context.WithCancel(context.Background())
	h.x.Stopping, h.x.PerHost = stopping, 1
	d := dispatch(dag.OpCreate, 1, node("a", "block-a", 1), node("b", "block-b", 1))
	d.MaxParallel = 2
	done := make(chan error, 1)
	go func() { done <- h.x.Run(context.Background(), d) }()
	var first string
	select {
	case first = <-h.host.start:
	case <-time.After(10 * time.Second):
		t.Fatal("no node started")
	}
	waiting := map[string]string{"block-a": "b", "block-b": "a"}[first]
	time.Sleep(100 * time.Millisecond) // the other one waits for the one slot
	stop()
	time.Sleep(200 * time.Millisecond)
	if got := h.host.scripts(); !slices.Equal(got, []string{first}) {
		t.Fatalf("ran %q", got)
	}
	h.x.CancelWorkflow("w1") // the running one would run on: end it
	select {
	case err := <-done:
		if !errors.Is(err, ErrStopping) {
			t.Fatalf("err %v, want ErrStopping", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the formula did not end")
	}
	for _, e := range h.stored() {
		if strings.HasPrefix(e, waiting+" ") {
			t.Fatalf("%s announced: %q", waiting, h.stored())
		}
	}
	if r := h.record(dag.OpCreate, waiting); r.Status != "" {
		t.Fatalf("%s recorded %+v", waiting, r)
	}
}
