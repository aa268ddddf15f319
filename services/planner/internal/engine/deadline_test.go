package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// clock is a test's time, moved by hand.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

var t0 = time.Unix(1_800_000_000, 0)

// timed is chain with a composition timeout of 5s.
const timed = `
name: chain
timeout: 5s
hosts: {h1: {transport: local}}
formulas:
  - id: a
    server: h1
    nodes: [{name: x, run: "sleep 60"}]
  - id: b
    server: h1
    depends_on: [{formula: a, condition: completed}]
    nodes: [{name: y, run: "true"}]
`

// restartAt is the engine restarted with nothing in memory at the
// clock's time, as a new planner process: it resumes every run.
func (h *harness) restartAt(c *clock, wait time.Duration, zones Zones) {
	h.t.Helper()
	h.fresh()
	h.e.Now, h.e.CancelWait, h.e.Zones = c.Now, wait, zones
	if _, err := h.e.Resume(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.want("resume")
}

// Past the composition's timeout, counted from its acceptance, the run
// stops as a cancel does: what has not started is cancelled, the
// executors are told to kill what runs (cancelling), and once the
// running formula has reported, the workflow is failed with the reason
// deadline. The deadline holds across a planner restart.
func TestCompositionDeadline(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "same planner", true: "planner restarted"}[restart], func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			c := &clock{t0}
			h.e.Now, h.e.CancelWait = c.Now, 30*time.Second
			must(t, h.submit(timed))
			must(t, h.formula("a", 1, dag.FormulaRunning))
			h.want("start", "workflow accepted", "workflow running", "a ready", "dispatch a create g1")
			if rec, _, _ := h.workflows.Get(context.Background(), h.id); rec.Deadline == nil || !rec.Deadline.Equal(t0.Add(5*time.Second)) {
				t.Fatalf("the record's deadline is %v, want acceptance + 5s", rec.Deadline)
			}
			if restart {
				c.now = t0.Add(3 * time.Second)
				h.restartAt(c, 30*time.Second, nil)
			}
			c.now = t0.Add(5*time.Second - time.Millisecond)
			h.e.ExpireDeadlines(context.Background())
			h.want("before the deadline")
			c.now = t0.Add(5 * time.Second)
			h.e.ExpireDeadlines(context.Background())
			h.want("at the deadline",
				"b/y cancelled: not started: the composition's timeout of 5s passed", "b cancelled",
				"workflow running: deadline: the composition's timeout of 5s passed with 2 formula(s) unfinished (a, b): stopping 1 running formula(s)")
			if snap, _, _ := h.runs.Get(context.Background(), h.id); !snap.Cancelling {
				t.Fatal("the run snapshot does not say the run is stopping: a late dispatch would run")
			}
			if err := h.control(events.VerbPause); err == nil {
				t.Fatal("a stopping workflow was paused")
			}
			h.want("refused pause")
			c.now = t0.Add(5500 * time.Millisecond)
			must(t, h.formula("a", 1, dag.FormulaCancelled))
			h.want("a's outcome", "workflow failed: deadline: the composition's timeout of 5s passed with 2 formula(s) unfinished (a, b)")
			if h.status() != dag.WorkflowFailed || h.snapshot() != "cc" {
				t.Fatalf("status %s, formulas %q", h.status(), h.snapshot())
			}
			c.now = t0.Add(time.Minute)
			h.e.ExpireDeadlines(context.Background())
			h.e.ExpireCancels(context.Background())
			must(t, h.formula("a", 1, dag.FormulaFailed))
			h.want("later")
		})
	}
}

// A run past its deadline whose running formula gives no outcome (its
// executor is gone) ends failed CancelWait after the deadline, across a
// restart; a retry has the whole timeout again, from the retry.
func TestCompositionDeadlineWithoutOutcomeThenRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := &clock{t0}
	h.e.Now, h.e.CancelWait = c.Now, 2*time.Second
	must(t, h.submit(timed))
	h.stored()
	c.now = t0.Add(5 * time.Second)
	h.e.ExpireDeadlines(context.Background())
	h.stored()
	c.now = t0.Add(6 * time.Second)
	h.restartAt(c, 2*time.Second, nil)
	c.now = t0.Add(7*time.Second - time.Millisecond)
	h.e.ExpireCancels(context.Background())
	h.e.ExpireDeadlines(context.Background())
	h.want("within the wait")
	c.now = t0.Add(7 * time.Second)
	h.e.ExpireCancels(context.Background())
	h.want("after the wait", "a cancelled",
		"workflow failed: deadline: the composition's timeout of 5s passed with 2 formula(s) unfinished (a, b); 1 running formula(s) gave no outcome within 2s: a")
	if h.status() != dag.WorkflowFailed {
		t.Fatalf("status %s", h.status())
	}
	c.now = t0.Add(10 * time.Second)
	must(t, h.control(events.VerbRetry))
	h.want("retry", "workflow running: retry: generation 2", "a ready", "dispatch a create g2")
	c.now = t0.Add(15*time.Second - time.Millisecond)
	h.e.ExpireDeadlines(context.Background())
	h.want("before the retry's deadline")
	c.now = t0.Add(15 * time.Second)
	h.e.ExpireDeadlines(context.Background())
	h.want("the retry's deadline", "b/y cancelled: not started: the composition's timeout of 5s passed", "b cancelled",
		"workflow running: deadline: the composition's timeout of 5s passed with 2 formula(s) unfinished (a, b): stopping 1 running formula(s)")
}

// A run that ends before its deadline has nothing left to keep.
func TestDeadlineOfAFinishedRunIsForgotten(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := &clock{t0}
	h.e.Now = c.Now
	must(t, h.submit(timed))
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	must(t, h.formula("b", 1, dag.FormulaSucceeded))
	if h.status() != dag.WorkflowSucceeded {
		t.Fatalf("status %s", h.status())
	}
	h.stored()
	if len(h.e.timers) != 0 {
		t.Fatalf("timers kept for a finished run: %v", h.e.timers)
	}
	c.now = t0.Add(time.Minute)
	h.e.ExpireDeadlines(context.Background())
	h.want("after the deadline")
}

// formulaTimed: a has a timeout of 3s; b waits for it; c is independent
// with a timeout of its own, counted from its dispatch.
const formulaTimed = `
name: ft
on_failure: continue
hosts: {h1: {transport: local}}
formulas:
  - id: a
    server: h1
    timeout: 3s
    nodes: [{name: x, run: "sleep 60"}]
  - id: b
    server: h1
    depends_on: [{formula: a, condition: completed}]
    nodes: [{name: y, run: "true"}]
  - id: c
    server: h1
    nodes: [{name: z, run: "true"}]
  - id: d
    server: h1
    timeout: 4s
    depends_on: [{formula: c, condition: completed}]
    nodes: [{name: w, run: "true"}]
`

// Past a formula's timeout, counted from its dispatch, the executors are
// told to stop that formula (and only it), which they report failed; the
// run's on_failure applies to the failure: here (continue) its dependent
// is blocked while the rest goes on, and the run fails naming the
// deadline. The deadline holds across a planner restart.
func TestFormulaDeadline(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "same planner", true: "planner restarted"}[restart], func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			c := &clock{t0}
			h.e.Now, h.e.CancelWait = c.Now, 30*time.Second
			h.errors = true
			must(t, h.submit(formulaTimed))
			h.want("start", "workflow accepted", "workflow running", "a ready", "dispatch a create g1", "c ready", "dispatch c create g1")
			c.now = t0.Add(2 * time.Second)
			must(t, h.formula("c", 1, dag.FormulaSucceeded)) // d is dispatched at 2s: its 4s end at 6s
			h.want("c", "d ready", "dispatch d create g1")
			if restart {
				h.restartAt(c, 30*time.Second, nil)
			}
			c.now = t0.Add(3*time.Second - time.Millisecond)
			h.e.ExpireDeadlines(context.Background())
			h.want("before a's deadline")
			c.now = t0.Add(3 * time.Second)
			h.e.ExpireDeadlines(context.Background())
			h.want("a's deadline", "workflow running: deadline: formula a's timeout of 3s passed: stopping it [stopping a]")
			snap, _, _ := h.runs.Get(context.Background(), h.id)
			if !slices.Equal(snap.Expired, []string{"a"}) || snap.Cancelling {
				t.Fatalf("run snapshot: expired %v, cancelling %v; want a expired, the run going on", snap.Expired, snap.Cancelling)
			}
			if restart {
				h.restartAt(c, 30*time.Second, nil)
			}
			must(t, h.handle(&events.FormulaEvent{Ref: h.ref("a", 1), Status: dag.FormulaFailed,
				Run: events.Run{Error: "deadline: formula a's timeout of 3s passed with 1 node(s) unfinished: x"}}))
			h.want("a's failure", "b/y blocked", "b blocked (a)")
			c.now = t0.Add(6*time.Second - time.Millisecond)
			h.e.ExpireDeadlines(context.Background())
			h.want("before d's deadline")
			c.now = t0.Add(6 * time.Second)
			h.e.ExpireDeadlines(context.Background())
			h.want("d's deadline", "workflow running: deadline: formula d's timeout of 4s passed: stopping it [stopping d]")
			must(t, h.formula("d", 1, dag.FormulaSucceeded)) // it had ended just before the kill
			h.want("d's success", "workflow failed: formula a failed: deadline: its timeout of 3s passed")
		})
	}
}

// A formula past its timeout whose executor gives no outcome fails
// CancelWait later, by the planner's own word; on_failure stop then
// cancels what has not started.
func TestFormulaDeadlineWithoutOutcome(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := &clock{t0}
	h.e.Now, h.e.CancelWait = c.Now, 2*time.Second
	h.errors = true
	must(t, h.submit(`
name: ft
hosts: {h1: {transport: local}}
formulas:
  - {id: a, server: h1, timeout: 3s, nodes: [{name: x, run: "sleep 60"}]}
  - {id: b, server: h1, depends_on: [a], nodes: [{name: y, run: "true"}]}
`))
	h.stored()
	c.now = t0.Add(3 * time.Second)
	h.e.ExpireDeadlines(context.Background())
	h.want("a's deadline", "workflow running: deadline: formula a's timeout of 3s passed: stopping it [stopping a]")
	c.now = t0.Add(4 * time.Second)
	h.restartAt(c, 2*time.Second, nil)
	c.now = t0.Add(5*time.Second - time.Millisecond)
	h.e.ExpireDeadlines(context.Background())
	h.want("within the wait")
	c.now = t0.Add(5 * time.Second)
	h.e.ExpireDeadlines(context.Background())
	h.want("after the wait",
		"a failed: deadline: formula a's timeout of 3s passed; no outcome from its executor within 2s: an executor that picks up its work later stops what still runs on the host",
		"b/y blocked", "b blocked (a)", "workflow failed: formula a failed: deadline: its timeout of 3s passed")
	if h.status() != dag.WorkflowFailed || h.snapshot() != "fb" {
		t.Fatalf("status %s, formulas %q", h.status(), h.snapshot())
	}
	must(t, h.formula("a", 1, dag.FormulaCancelled)) // the executor, late
	h.want("late outcome")
}

// A paused run's deadline holds: a planner restarted while it is paused
// (which steps nothing of it) still ends it at its deadline, failed, with
// what it had not started cancelled.
func TestDeadlineOfAPausedRunAcrossRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := &clock{t0}
	h.e.Now = c.Now
	must(t, h.submit(timed))
	must(t, h.control(events.VerbPause))
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	h.stored()
	c.now = t0.Add(2 * time.Second)
	h.restartAt(c, 0, nil)
	c.now = t0.Add(5 * time.Second)
	h.e.ExpireDeadlines(context.Background())
	h.want("the deadline", "b/y cancelled: not started: the composition's timeout of 5s passed", "b cancelled",
		"workflow failed: deadline: the composition's timeout of 5s passed with 1 formula(s) unfinished (b)")
	if h.status() != dag.WorkflowFailed {
		t.Fatalf("status %s", h.status())
	}
}

// once is timed with a single formula.
const once = `
name: once
timeout: 5s
hosts: {h1: {transport: local}}
formulas:
  - id: a
    server: h1
    nodes: [{name: x, run: "sleep 3"}]
`

// The composition's deadline passes on the planner's clock while its one
// formula's outcome is held up (a NATS outage: the node ended on its host
// in time, its events could not be stored). The executor then reports it
// succeeded (it had ended before the stop reached it): the deadline
// stopped nothing, and the run ends succeeded, not failed with "1
// formula unfinished", which its stream contradicted. A deadline that
// cancelled something still fails the run.
func TestADeadlineThatStoppedNothingDoesNotFailTheRun(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		yaml, want string
		cancelled  []string
	}{
		{once, "workflow succeeded", nil},
		{timed, "workflow failed: deadline: the composition's timeout of 5s passed with 2 formula(s) unfinished (a, b)",
			[]string{"b/y cancelled: not started: the composition's timeout of 5s passed", "b cancelled"}},
	} {
		h := newHarness(t)
		clk := &clock{t0}
		h.e.Now, h.e.CancelWait = clk.Now, 30*time.Second
		must(t, h.submit(c.yaml))
		must(t, h.formula("a", 1, dag.FormulaRunning))
		h.stored()
		clk.now = t0.Add(5 * time.Second)
		h.e.ExpireDeadlines(context.Background())
		got := h.stored()
		if len(got) != len(c.cancelled)+1 || !slices.Equal(got[:len(c.cancelled)], c.cancelled) {
			t.Fatalf("at the deadline: %q", got)
		}
		clk.now = t0.Add(5500 * time.Millisecond)
		must(t, h.formula("a", 1, dag.FormulaSucceeded))
		if got := h.stored(); !slices.Equal(got, []string{c.want}) {
			t.Errorf("%s: a's success: %q, want %q", c.yaml[6:11], got, c.want)
		}
	}
}
