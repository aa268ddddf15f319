package dag_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// A retry (gantry retry --node x/n) carries over a rollout instance's
// failure that was within max_failed. Under on_failure: stop a NEW failure
// must still stop the run (docs/composition.md, Retrying part of a run: "a
// new failure does, as usual"). RunState.stopping subtracts the carried
// failure twice (kept + tolerated), so the new failure is not counted and
// the pending formula y is dispatched anyway.
func TestNewFailureStopsWithACarriedToleratedRolloutFailure(t *testing.T) {
	doc := `{"name":"r","on_failure":"stop","hosts":{"h1":{"transport":"local","labels":{"role":"web"}},"h2":{"transport":"local","labels":{"role":"web"}}},
"groups":{"web":{"labels":{"role":"web"}}},
"formulas":[{"id":"app","group":"web","rollout":{"batch":2,"max_failed":1},"nodes":[{"name":"n","run":"true"}]},
{"id":"x","server":"h1","nodes":[{"name":"n","run":"true"}]},
{"id":"z","server":"h1","nodes":[{"name":"n","run":"true"}]},
{"id":"y","server":"h1","depends_on":["z"],"nodes":[{"name":"n","run":"true"}]}]}`
	c, err := dag.ParseJSONComposition([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	p := dag.PlanLoaded(c)
	idx := func(id string) int {
		i, ok := p.Index(id)
		if !ok {
			t.Fatalf("no formula %s", id)
		}
		return i
	}
	s := p.NewRunState()
	// Generation 2: app-h1 failed in generation 1 (within max_failed) and
	// was left out of the retry; app-h2 succeeded.
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.SetFormula(idx("app-h1"), dag.FormulaFailed, -1))
	s.Carry(idx("app-h1"))
	must(s.SetFormula(idx("app-h2"), dag.FormulaSucceeded, -1))
	d := p.Step(s)
	s.Apply(d)
	// x fails now: a new failure. z succeeds afterwards.
	must(s.SetFormula(idx("x"), dag.FormulaFailed, -1))
	s.Apply(p.StepAfter(s, idx("x")))
	must(s.SetFormula(idx("z"), dag.FormulaSucceeded, -1))
	d = p.StepAfter(s, idx("z"))
	for _, i := range d.Dispatch {
		if p.Formulas[i].ID == "y" {
			t.Fatalf("y dispatched after the new failure of x under on_failure stop (failures %d)", s.Failures())
		}
	}
}
