package engine

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

func (h *harness) want(what string, want ...string) {
	h.t.Helper()
	if got := h.stored(); !slices.Equal(got, want) {
		h.t.Fatalf("%s: stored\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A cancelled workflow waits for the outcome of the formula it has
// running, but not for ever: CancelWait after the cancel it ends
// cancelled without it, the formula cancelled; the outcome that comes
// later changes nothing, and a retry runs the formula again. The wait
// runs from the cancel, across a planner restart.
func TestCancelWaitIsBounded(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "same planner", true: "planner restarted"}[restart], func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			start := time.Unix(1_800_000_000, 0)
			now := start
			clock := func() time.Time { return now }
			h.e.Now, h.e.CancelWait = clock, 5*time.Second
			if err := h.submit(chain); err != nil {
				t.Fatal(err)
			}
			if err := h.formula("a", 1, dag.FormulaRunning); err != nil {
				t.Fatal(err)
			}
			h.stored()
			if err := h.control(events.VerbCancel); err != nil {
				t.Fatal(err)
			}
			h.want("cancel", "b/y cancelled: not started: the workflow was cancelled", "b cancelled", "workflow running: cancelling by request: stopping 1 running formula(s)")
			if restart {
				now = start.Add(3 * time.Second)
				h.fresh()
				h.e.Now, h.e.CancelWait = clock, 5*time.Second
				if _, err := h.e.Resume(context.Background()); err != nil {
					t.Fatal(err)
				}
				h.want("resume")
			}
			now = start.Add(5*time.Second - time.Millisecond)
			h.e.ExpireCancels(context.Background())
			h.want("before the wait is over")
			if h.status() != dag.WorkflowRunning {
				t.Fatalf("status %s before the wait is over", h.status())
			}
			now = start.Add(5 * time.Second)
			h.e.ExpireCancels(context.Background())
			h.want("once the wait is over", "a cancelled", "workflow cancelled: cancelled by request; 1 running formula(s) gave no outcome within 5s: a")
			if h.status() != dag.WorkflowCancelled || h.snapshot() != "cc" {
				t.Fatalf("status %s, formulas %q", h.status(), h.snapshot())
			}
			if snap, _, _ := h.runs.Get(context.Background(), h.id); snap.Cancelling || snap.Status != dag.WorkflowCancelled {
				t.Fatalf("run snapshot %+v: the executors must see the workflow cancelled", snap)
			}
			h.e.ExpireCancels(context.Background())
			if err := h.formula("a", 1, dag.FormulaSucceeded); err != nil {
				t.Fatal(err)
			}
			h.want("late outcome")
			if err := h.control(events.VerbRetry); err != nil {
				t.Fatal(err)
			}
			h.want("retry", "workflow running: retry: generation 2", "a ready", "dispatch a create g2")
			now = start.Add(time.Minute)
			h.e.ExpireCancels(context.Background())
			h.want("after the retry")
			if h.status() != dag.WorkflowRunning {
				t.Fatalf("status %s after the retry", h.status())
			}
		})
	}
}

// Without CancelWait, the wait is DefaultCancelWait; an outcome within it
// ends the workflow as before.
func TestCancelWaitDefault(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	start := time.Unix(1_800_000_000, 0)
	now := start
	h.e.Now = func() time.Time { return now }
	if err := h.submit(parallel); err != nil {
		t.Fatal(err)
	}
	h.stored()
	if err := h.control(events.VerbCancel); err != nil {
		t.Fatal(err)
	}
	h.want("cancel", "y/yy cancelled: not started: the workflow was cancelled", "y cancelled", "workflow running: cancelling by request: stopping 2 running formula(s)")
	if err := h.formula("x", 1, dag.FormulaCancelled); err != nil {
		t.Fatal(err)
	}
	h.want("x's outcome")
	now = start.Add(DefaultCancelWait - time.Millisecond)
	h.e.ExpireCancels(context.Background())
	h.want("before the default wait is over")
	now = start.Add(DefaultCancelWait)
	h.e.ExpireCancels(context.Background())
	h.want("once it is over", "a cancelled", "workflow cancelled: cancelled by request; 1 running formula(s) gave no outcome within 30s: a")
}
