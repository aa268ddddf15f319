package dag_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

func retryPlan(t *testing.T, onFailure dag.OnFailure) *dag.Plan {
	t.Helper()
	n := func(name string, deps ...string) dag.Node {
		return dag.Node{Name: name, Run: "true", DependsOn: deps}
	}
	c := &dag.Composition{Name: "w", OnFailure: onFailure, Hosts: map[string]dag.Host{"h": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{
			{ID: "a", Server: "h", MaxParallel: 2, Nodes: []dag.Node{n("x"), n("y"), n("z", "x"), n("q", "y")}},
			{ID: "b", Server: "h", Nodes: []dag.Node{n("v")}},
			{ID: "c", Server: "h", DependsOn: []dag.FormulaDep{{Formula: "a"}}, Nodes: []dag.Node{n("w")}},
			{ID: "d", Server: "h", Nodes: []dag.Node{n("u")}},
		}}
	p, err := dag.NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// states sets formula states by id.
func states(t *testing.T, p *dag.Plan, st map[string]dag.FormulaState) *dag.RunState {
	t.Helper()
	s := p.NewRunState()
	for id, v := range st {
		i, _ := p.Index(id)
		if err := s.SetFormula(i, v, -1); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestRetryNodes(t *testing.T) {
	t.Parallel()
	// a/x and b/v failed (a/y too in "both of a"), c blocked, d cancelled.
	run := map[string]dag.FormulaState{"a": dag.FormulaFailed, "b": dag.FormulaFailed, "c": dag.FormulaBlocked, "d": dag.FormulaCancelled}
	for name, tc := range map[string]struct {
		failed  []string // recorded failed
		refs    []string
		rerun   []string
		hold    string
		carried []string
		err     string
	}{
		"one of two formulas":   {failed: []string{"a/x", "b/v"}, refs: []string{"a/x"}, rerun: []string{"a", "c"}, carried: []string{"b"}},
		"both of a":             {failed: []string{"a/x", "a/y", "b/v"}, refs: []string{"a/x"}, rerun: []string{"a", "c"}, hold: "a: y q", carried: []string{"b"}},
		"every failure":         {failed: []string{"a/x", "b/v"}, refs: []string{"a/x", "b/v"}, rerun: []string{"a", "b", "c", "d"}},
		"a node that succeeded": {failed: []string{"a/x"}, refs: []string{"a/y"}, err: `a/y: it did not fail (succeeded)`},
		"a node that never ran": {failed: []string{"a/x"}, refs: []string{"c/w"}, err: `c/w: it did not fail (never ran)`},
		"no such node":          {refs: []string{"a/nope"}, err: "formula a has no node nope"},
		"no such formula":       {refs: []string{"zz/x"}, err: "the workflow has no formula zz"},
		"not formula/node":      {refs: []string{"x"}, err: `"x": name it as formula/node`},
		"none":                  {err: "no node named"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := retryPlan(t, dag.OnFailureStop)
			s := states(t, p, run)
			rec := func(i, j int) (dag.NodeState, error) {
				ref := p.Formulas[i].ID + "/" + p.Formulas[i].Nodes[j].Name
				switch {
				case slices.Contains(tc.failed, ref):
					return dag.NodeFailed, nil
				case s.Formula(i) == dag.FormulaFailed && (ref == "a/y" || ref == "a/z" && !slices.Contains(tc.failed, "a/x")):
					return dag.NodeSucceeded, nil
				}
				return "", nil
			}
			sc, err := p.RetryNodes(s, tc.refs, rec)
			if tc.err != "" {
				if !errors.Is(err, dag.ErrRetryNode) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ids := func(is []int) []string {
				var out []string
				for _, i := range is {
					out = append(out, p.Formulas[i].ID)
				}
				return out
			}
			if got := ids(sc.Rerun); !slices.Equal(got, tc.rerun) {
				t.Errorf("rerun %v, want %v", got, tc.rerun)
			}
			if got := ids(sc.Carried); !slices.Equal(got, tc.carried) {
				t.Errorf("carried %v, want %v", got, tc.carried)
			}
			hold := ""
			for i, js := range sc.Hold {
				hold += p.Formulas[i].ID + ":"
				for _, j := range js {
					hold += " " + p.Formulas[i].Nodes[j].Name
				}
			}
			if hold != tc.hold {
				t.Errorf("hold %q, want %q", hold, tc.hold)
			}
		})
	}
}

// A carried failure fails the run but does not stop, under on_failure
// stop, what a retry set pending; a new failure does.
func TestCarriedFailureDoesNotStop(t *testing.T) {
	t.Parallel()
	p := retryPlan(t, dag.OnFailureStop)
	a, _ := p.Index("a")
	b, _ := p.Index("b")
	c, _ := p.Index("c")
	d, _ := p.Index("d")
	s := states(t, p, map[string]dag.FormulaState{"b": dag.FormulaFailed, "c": dag.FormulaPending, "d": dag.FormulaCancelled})
	if got := p.Step(s); len(got.Dispatch) != 0 || len(got.Cancelled) != 2 {
		t.Fatalf("without carry: %+v", got)
	}
	s.Carry(b)
	if got := p.Step(s); fmt.Sprint(got.Dispatch) != fmt.Sprint([]int{a}) || len(got.Cancelled) != 0 {
		t.Fatalf("with b carried: %+v", got)
	}
	s.Apply(p.Step(s))
	retryMust(t, s.SetFormula(a, dag.FormulaSucceeded, -1))
	got := p.StepAfter(s, a)
	if fmt.Sprint(got.Dispatch) != fmt.Sprint([]int{c}) {
		t.Fatalf("after a: %+v", got)
	}
	s.Apply(got)
	retryMust(t, s.SetFormula(c, dag.FormulaSucceeded, -1))
	if got := p.StepAfter(s, c); !got.Done || got.Result != dag.WorkflowFailed {
		t.Fatalf("end: %+v (d %s)", got, s.Formula(d))
	}
	// A new failure stops the run again.
	s2 := states(t, p, map[string]dag.FormulaState{"b": dag.FormulaFailed})
	s2.Carry(b)
	retryMust(t, s2.SetFormula(d, dag.FormulaFailed, -1))
	if got := p.StepAfter(s2, d); len(got.Dispatch) != 0 || len(got.Cancelled) == 0 {
		t.Fatalf("after a new failure: %+v", got)
	}
	// Setting a carried formula's state again ends the mark.
	retryMust(t, s2.SetFormula(b, dag.FormulaPending, -1))
	if s2.Carried(b) {
		t.Fatal("still carried after SetFormula")
	}
}

func retryMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
