package engine

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A workflow counts as active from its start until its end is stored,
// and its outcome is counted once. Not parallel: the counter is global.
func TestActiveAndOutcomeCounted(t *testing.T) {
	count := func(st dag.WorkflowState) float64 {
		return testutil.ToFloat64(workflowResults.WithLabelValues(string(st)))
	}
	failed, succeeded := count(dag.WorkflowFailed), count(dag.WorkflowSucceeded)
	h := newHarness(t)
	if err := h.submit(chain); err != nil {
		t.Fatal(err)
	}
	if n := h.e.Active(); n != 1 {
		t.Fatalf("active after start = %d, want 1", n)
	}
	if err := h.formula("a", 1, dag.FormulaFailed); err != nil {
		t.Fatal(err)
	}
	if n := h.e.Active(); n != 0 {
		t.Fatalf("active after the end = %d, want 0", n)
	}
	// The same event again (a redelivery) ends nothing more.
	if err := h.formula("a", 1, dag.FormulaFailed); err != nil {
		t.Fatal(err)
	}
	if d := count(dag.WorkflowFailed) - failed; d != 1 {
		t.Fatalf("failed workflows +%g, want +1", d)
	}
	if d := count(dag.WorkflowSucceeded) - succeeded; d != 0 {
		t.Fatalf("succeeded workflows +%g, want +0", d)
	}
}
