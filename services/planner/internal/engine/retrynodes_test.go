package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// a and b fail at level 0; c and d (each on one of them) are blocked, e on
// c too. Under on_failure stop, d is cancelled when a fails first.
const twoFailures = `
name: w
hosts: {h1: {transport: local}}
formulas:
  - id: a
    server: h1
    max_parallel: 2
    nodes:
      - {name: x, run: "false", depends_on: []}
      - {name: y, run: "false", depends_on: []}
      - {name: z, run: "true", depends_on: [x]}
  - id: b
    server: h1
    nodes: [{name: v, run: "false"}]
  - id: c
    server: h1
    depends_on: [a]
    nodes: [{name: w, run: "true"}]
  - id: d
    server: h1
    depends_on: [b]
    nodes: [{name: u, run: "true"}]
  - id: e
    server: h1
    depends_on: [c]
    nodes: [{name: t, run: "true"}]
`

// failBoth runs twoFailures to its end: a/x and b/v failed (a/y succeeded
// when only in is "x"; both a/x and a/y failed when in is "xy").
func failBoth(t *testing.T, h *harness, aFailed ...string) {
	t.Helper()
	must(t, h.submit(twoFailures))
	for _, n := range []string{"x", "y"} {
		st := dag.NodeSucceeded
		for _, f := range aFailed {
			if f == n {
				st = dag.NodeFailed
			}
		}
		h.recordNode(dag.OpCreate, "a", n, st)
	}
	h.recordNode(dag.OpCreate, "b", "v", dag.NodeFailed)
	must(t, h.formula("a", 1, dag.FormulaFailed))
	must(t, h.formula("b", 1, dag.FormulaFailed))
	if h.status() != dag.WorkflowFailed {
		t.Fatalf("status %s, want failed", h.status())
	}
	if got := h.snapshot(); got != "ffbcb" {
		t.Fatalf("snapshot %q, want ffbcb", got)
	}
	h.stored()
}

func (h *harness) retryNodes(nodes ...string) error {
	_, err := h.e.ControlRequest(context.Background(), h.id, events.VerbRetry, events.ControlRequest{Nodes: nodes}, operator)
	return err
}

// Retrying one of two failed nodes runs only its formula and the formulas
// blocked behind it; the other failure stays failed (and does not stop the
// retried part under on_failure stop), what it blocked stays blocked, and
// the workflow ends failed. The carried failure survives a restart.
func TestRetryOneNodeOfTwoFailures(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	failBoth(t, h, "x")
	must(t, h.retryNodes("a/x"))
	wantStored(t, h, "workflow running: retry of a/x: generation 2", "a ready", "dispatch a create g2")
	h.fresh() // the carried failure of b is in the record, not only in memory
	must(t, h.formula("a", 2, dag.FormulaSucceeded))
	wantStored(t, h, "c ready", "dispatch c create g2")
	must(t, h.formula("c", 2, dag.FormulaSucceeded))
	wantStored(t, h, "e ready", "dispatch e create g2")
	must(t, h.formula("e", 2, dag.FormulaSucceeded))
	wantStored(t, h, "workflow failed: formula b failed")
	if got := h.snapshot(); got != "sfscs" {
		t.Fatalf("snapshot %q, want sfscs (b still failed, d still not started)", got)
	}
	if h.status() != dag.WorkflowFailed {
		t.Fatalf("status %s, want failed", h.status())
	}
	// A plain retry afterwards runs what is left.
	must(t, h.control(events.VerbRetry))
	wantStored(t, h, "workflow running: retry: generation 3", "b ready", "dispatch b create g3")
	must(t, h.formula("b", 3, dag.FormulaSucceeded))
	wantStored(t, h, "d ready", "dispatch d create g3")
	must(t, h.formula("d", 3, dag.FormulaSucceeded))
	wantStored(t, h, "workflow succeeded")
}

// A new failure among the retried formulas stops the run as usual.
func TestRetryOfNodesFailingAgainStops(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	failBoth(t, h, "x")
	must(t, h.retryNodes("a/x"))
	h.stored()
	must(t, h.formula("a", 2, dag.FormulaFailed))
	wantStored(t, h, "c/w blocked", "c blocked (a)", "e/t blocked", "e blocked (a)", "workflow failed: 2 formulas failed: formula a failed; formula b failed")
}

// Two failed nodes in one formula: the retried one's formula is dispatched
// with the other held (the executor leaves it failed), so the formula
// fails again and what depends on it stays blocked.
func TestRetryOneOfTwoFailedNodesOfAFormula(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	failBoth(t, h, "x", "y")
	must(t, h.retryNodes("a/x"))
	wantStored(t, h, "workflow running: retry of a/x: generation 2", "a ready", "dispatch a create g2 hold y")
	must(t, h.formula("a", 2, dag.FormulaFailed))
	wantStored(t, h, "c/w blocked", "c blocked (a)", "e/t blocked", "e blocked (a)", "workflow failed: 2 formulas failed: formula a failed; formula b failed")
}

// Retrying every failure runs what they kept from starting too, as a plain
// retry would.
func TestRetryOfEveryFailedNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	failBoth(t, h, "x")
	must(t, h.retryNodes("a/x", "b/v"))
	wantStored(t, h, "workflow running: retry of a/x, b/v: generation 2", "a ready", "dispatch a create g2", "b ready", "dispatch b create g2")
}

// A name that is not a failed node of the run is refused, naming it, and
// nothing starts.
func TestRetryOfNodesRefusesWhatDidNotFail(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		nodes []string
		want  string
	}{
		"succeeded":       {[]string{"a/x", "a/y"}, "a/y: it did not fail (succeeded)"},
		"never ran":       {[]string{"c/w"}, "c/w: it did not fail (never ran)"},
		"no such node":    {[]string{"a/nope"}, "a/nope: formula a has no node nope"},
		"no such formula": {[]string{"zz/x"}, "zz/x: the workflow has no formula zz"},
		"not a name":      {[]string{"ax"}, `"ax": name it as formula/node`},
		"bad token":       {[]string{"a/X.y"}, `cannot retry that node "a/X.y": node "X.y" contains '.'`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			failBoth(t, h, "x")
			err := h.retryNodes(tc.nodes...)
			if !errors.Is(err, ErrConflict) || !errors.Is(err, dag.ErrRetryNode) {
				t.Fatalf("err %v, want a refusal", err)
			}
			if !contains(err.Error(), tc.want) {
				t.Fatalf("err %q does not say %q", err, tc.want)
			}
			wantStored(t, h)
			if h.status() != dag.WorkflowFailed || h.snapshot() != "ffbcb" {
				t.Fatalf("changed: %s %s", h.status(), h.snapshot())
			}
			rec, _, _ := h.workflows.Get(context.Background(), h.id)
			if rec.Generation != 1 {
				t.Fatalf("generation %d, want 1", rec.Generation)
			}
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
