package dag

import (
	"fmt"
	"testing"

	"github.com/gantry-dev/gantry/pkg/template"
)

// TestSpentRenderingIsReportedOnce: once a composition's templates are out
// of steps or of time, every template after it fails the same way; the
// composition gets one problem for it, not one per template and host.
func TestSpentRenderingIsReportedOnce(t *testing.T) {
	for _, spent := range []error{template.ErrBudget, template.ErrTooSlow, fmt.Errorf("template: %w", template.ErrTooSlow)} {
		r := newRenderer(&Composition{})
		var ps problems
		f := &Formula{ID: "f"}
		for _, path := range []string{"formulas[0].nodes[0].run", "formulas[0].nodes[0].check", "formulas[1].nodes[0].run"} {
			r.report(&ps, path, f, spent)
		}
		if len(ps.list) != 1 {
			t.Errorf("%v: %d problems, want 1: %+v", spent, len(ps.list), ps.list)
		}
	}
}
