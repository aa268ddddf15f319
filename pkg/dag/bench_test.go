package dag_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/dag/dagtest"
)

func layeredPlan(t testing.TB, formulas, nodesPer, width int) *dag.Plan {
	t.Helper()
	p, err := dag.NewPlan(dagtest.Layered(formulas, nodesPer, width))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkValidatePlan100k validates, normalizes and plans a 100,000-node
// composition (10,000 formulas of 10 nodes). The composition is generated
// outside the timer; B/op is the memory the work allocates.
func BenchmarkValidatePlan100k(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		c := dagtest.Layered(10000, 10, 100)
		b.StartTimer()
		if _, err := dag.NewPlan(c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStepAfter10k is the per-event cost on a 10,000-formula plan:
// each iteration records one formula transition and asks what follows.
func BenchmarkStepAfter10k(b *testing.B) {
	p := layeredPlan(b, 10000, 1, 100)
	s, queue := startRun(p)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if len(queue) == 0 {
			b.StopTimer()
			s, queue = startRun(p)
			b.StartTimer()
		}
		i := queue[0]
		queue = queue[1:]
		next := dag.FormulaSucceeded
		switch s.Formula(i) {
		case dag.FormulaSucceeded, dag.FormulaGating:
			next = dag.FormulaHealthy
		}
		s.SetFormula(i, next, -1)
		d := p.StepAfter(s, i)
		s.Apply(d)
		queue = append(queue, d.Dispatch...)
		queue = append(queue, d.Gate...)
	}
}

// BenchmarkStepFull10k is the full-scan Step on the same plan, for
// comparison (the planner uses it once, when it recovers a run).
func BenchmarkStepFull10k(b *testing.B) {
	p := layeredPlan(b, 10000, 1, 100)
	s, _ := startRun(p)
	b.ReportAllocs()
	for b.Loop() {
		_ = p.Step(s)
	}
}

func startRun(p *dag.Plan) (*dag.RunState, []int) {
	s := p.NewRunState()
	d := p.Step(s)
	s.Apply(d)
	return s, append([]int(nil), d.Dispatch...)
}
