package dag_test

import (
	"slices"
	"sort"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// outcome says how a formula ends when it runs: its state after running
// (succeeded or failed) and, for gated formulas, the gate's verdict.
type outcome func(id string) (ran dag.FormulaState, healthy bool)

func allGood(string) (dag.FormulaState, bool) { return dag.FormulaSucceeded, true }

// simulate drives a run the way the planner does: apply each decision,
// finish dispatched formulas one at a time in dispatch order, and check at
// every event that StepAfter agrees with a full Step.
func simulate(t testing.TB, p *dag.Plan, out outcome) (*dag.RunState, dag.Decision, []string) {
	t.Helper()
	s := p.NewRunState()
	d := p.Step(s)
	s.Apply(d)
	var queue []int // ready or gating, in order
	queue = append(queue, d.Dispatch...)
	var started []string
	for _, i := range d.Dispatch {
		started = append(started, p.Formulas[i].ID)
	}
	for steps := 0; !d.Done; steps++ {
		if steps > 4*len(p.Formulas)+10 || len(queue) == 0 {
			t.Fatalf("run stuck after %d steps: queue %v", steps, queue)
		}
		i := queue[0]
		queue = queue[1:]
		f := p.Formulas[i]
		// every prerequisite must be satisfied when a formula runs
		if s.Formula(i) == dag.FormulaReady {
			for _, dep := range f.Deps {
				st := s.Formula(dep.Formula)
				if dep.Condition == dag.ConditionHealthy && st != dag.FormulaHealthy ||
					!(st == dag.FormulaSucceeded || st == dag.FormulaGating || st == dag.FormulaHealthy || st == dag.FormulaUnhealthy) {
					t.Fatalf("%s ran while %s was %s (condition %s)", f.ID, p.Formulas[dep.Formula].ID, st, dep.Condition)
				}
			}
			ran, _ := out(f.ID)
			s.SetFormula(i, ran, -1)
		} else { // gating
			_, healthy := out(f.ID)
			st := dag.FormulaUnhealthy
			if healthy {
				st = dag.FormulaHealthy
			}
			s.SetFormula(i, st, -1)
		}
		full := p.Step(s)
		d = p.StepAfter(s, i)
		if !sameSet(full.Dispatch, d.Dispatch) || !sameSet(full.Gate, d.Gate) ||
			!sameSet(blockedIDs(full.Blocked), blockedIDs(d.Blocked)) || !sameSet(blockedIDs(full.Cancelled), blockedIDs(d.Cancelled)) ||
			full.Done != d.Done || full.Result != d.Result {
			t.Fatalf("StepAfter(%s) = %+v, Step = %+v", f.ID, d, full)
		}
		s.Apply(d)
		queue = append(queue, d.Dispatch...)
		queue = append(queue, d.Gate...)
		for _, k := range d.Dispatch {
			started = append(started, p.Formulas[k].ID)
		}
	}
	return s, d, started
}

func blockedIDs(bs []dag.Blocked) []int {
	out := make([]int, len(bs))
	for i, b := range bs {
		out[i] = b.Formula
	}
	return out
}

func sameSet(a, b []int) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Ints(a)
	sort.Ints(b)
	return slices.Equal(a, b)
}

func stateOf(t *testing.T, p *dag.Plan, s *dag.RunState, id string) (dag.FormulaState, string) {
	t.Helper()
	i, ok := p.Index(id)
	if !ok {
		t.Fatalf("no formula %s", id)
	}
	b := ""
	if k := s.Blocker(i); k >= 0 {
		b = p.Formulas[k].ID
	}
	return s.Formula(i), b
}

func TestStepHappyPath(t *testing.T) {
	p := mustPlan(t, k8s)
	s, d, started := simulate(t, p, allGood)
	if d.Result != dag.WorkflowSucceeded {
		t.Fatalf("result %s", d.Result)
	}
	want := []string{"cp-os", "w0-os", "w1-os", "cp-kube", "w0-kube", "w1-kube", "cni"}
	if !slices.Equal(started, want) {
		t.Errorf("dispatch order %v, want %v", started, want)
	}
	if st, _ := stateOf(t, p, s, "cp-kube"); st != dag.FormulaHealthy {
		t.Errorf("cp-kube %s", st)
	}
}

func TestStepGateBlocksOnlyHealthyDependents(t *testing.T) {
	// cp-kube turns unhealthy: w*-kube wait for healthy and are blocked
	// (naming cp-kube), so is cni behind them; with continue nothing else stops.
	p := mustPlan(t, withField(k8s, `"on_failure":"continue"`))
	s, d, _ := simulate(t, p, func(id string) (dag.FormulaState, bool) { return dag.FormulaSucceeded, id != "cp-kube" })
	if d.Result != dag.WorkflowFailed {
		t.Fatalf("result %s", d.Result)
	}
	for id, want := range map[string]dag.FormulaState{"cp-kube": dag.FormulaUnhealthy, "w0-os": dag.FormulaSucceeded, "w1-os": dag.FormulaSucceeded,
		"w0-kube": dag.FormulaBlocked, "w1-kube": dag.FormulaBlocked, "cni": dag.FormulaBlocked} {
		st, blocker := stateOf(t, p, s, id)
		if st != want {
			t.Errorf("%s = %s, want %s", id, st, want)
		}
		if st == dag.FormulaBlocked && blocker != "cp-kube" {
			t.Errorf("%s blocked by %q, want the root cause cp-kube", id, blocker)
		}
	}
}

func TestStepOnFailureStop(t *testing.T) {
	// cp-os finishes first, so cp-kube is dispatched; then w0-os fails.
	// Under stop, what was dispatched finishes (cp-kube, gate included),
	// w0-kube and cni are blocked by w0-os, and w1-kube, which had not
	// started, is cancelled.
	p := mustPlan(t, k8s)
	s, d, _ := simulate(t, p, func(id string) (dag.FormulaState, bool) {
		if id == "w0-os" {
			return dag.FormulaFailed, true
		}
		return dag.FormulaSucceeded, true
	})
	if d.Result != dag.WorkflowFailed {
		t.Fatalf("result %s", d.Result)
	}
	for id, want := range map[string]dag.FormulaState{"cp-os": dag.FormulaSucceeded, "w0-os": dag.FormulaFailed, "w1-os": dag.FormulaSucceeded,
		"cp-kube": dag.FormulaHealthy, "w0-kube": dag.FormulaBlocked, "w1-kube": dag.FormulaCancelled, "cni": dag.FormulaBlocked} {
		if st, _ := stateOf(t, p, s, id); st != want {
			t.Errorf("%s = %s, want %s", id, st, want)
		}
	}
	if _, b := stateOf(t, p, s, "cni"); b != "w0-os" {
		t.Errorf("cni blocked by %q, want w0-os", b)
	}
}

func TestStepOnFailureContinue(t *testing.T) {
	p := mustPlan(t, withField(k8s, `"on_failure":"continue"`))
	s, d, _ := simulate(t, p, func(id string) (dag.FormulaState, bool) {
		if id == "w0-os" {
			return dag.FormulaFailed, true
		}
		return dag.FormulaSucceeded, true
	})
	if d.Result != dag.WorkflowFailed {
		t.Fatalf("result %s", d.Result)
	}
	for id, want := range map[string]dag.FormulaState{"cp-kube": dag.FormulaHealthy, "w1-kube": dag.FormulaSucceeded,
		"w0-kube": dag.FormulaBlocked, "cni": dag.FormulaBlocked} {
		if st, _ := stateOf(t, p, s, id); st != want {
			t.Errorf("%s = %s, want %s", id, st, want)
		}
	}
}

func TestStepLargeLayered(t *testing.T) {
	p := layeredPlan(t, 2000, 2, 50)
	_, d, started := simulate(t, p, allGood)
	if d.Result != dag.WorkflowSucceeded || len(started) != 2000 {
		t.Fatalf("result %s after %d dispatches", d.Result, len(started))
	}
}

func TestNodeStep(t *testing.T) {
	p := mustPlan(t, base(`{"id":"a","server":"h1","max_parallel":2,"nodes":[
		{"name":"setup","run":"x"},{"name":"x","run":"x","depends_on":["setup"]},{"name":"y","run":"x","depends_on":["setup"]},
		{"name":"z","run":"x","depends_on":["setup"]},{"name":"final","run":"x","depends_on":["x","y","z"]}]}`))
	f := &p.Formulas[0]
	idx := map[string]int{}
	for j, n := range f.Nodes {
		idx[n.Name] = j
	}
	st := make([]dag.NodeState, len(f.Nodes))
	for j := range st {
		st[j] = dag.NodePending
	}
	d := f.NodeStep(st, false, false)
	if len(d.Start) != 1 || d.Start[0] != idx["setup"] {
		t.Fatalf("first start %v", d.Start)
	}
	st[idx["setup"]] = dag.NodeSucceeded
	d = f.NodeStep(st, false, false)
	if !slices.Equal(d.Start, []int{idx["x"], idx["y"]}) {
		t.Fatalf("max_parallel 2 starts %v", d.Start)
	}
	st[idx["x"]], st[idx["y"]] = dag.NodeRunning, dag.NodeRunning
	if d = f.NodeStep(st, false, false); len(d.Start) != 0 || d.Done {
		t.Fatalf("over max_parallel: %+v", d)
	}
	st[idx["x"]] = dag.NodeFailed
	// Failure under stop: final is blocked by x, z is cancelled, y runs on.
	d = f.NodeStep(st, false, false)
	if len(d.Start) != 0 || !slices.Equal(d.Cancelled, []int{idx["z"]}) || len(d.Blocked) != 1 ||
		d.Blocked[0] != (dag.BlockedNode{Node: idx["final"], Blocker: idx["x"]}) || d.Done || !d.Failed {
		t.Fatalf("after failure: %+v", d)
	}
	// Under continue, z still starts.
	d = f.NodeStep(st, false, true)
	if !slices.Equal(d.Start, []int{idx["z"]}) {
		t.Fatalf("continue: %+v", d)
	}
	st[idx["y"]], st[idx["z"]], st[idx["final"]] = dag.NodeSucceeded, dag.NodeCancelled, dag.NodeBlocked
	if d = f.NodeStep(st, false, false); !d.Done || !d.Failed {
		t.Fatalf("end: %+v", d)
	}
}

func TestRunStateRejectsBadInput(t *testing.T) {
	p := mustPlan(t, k8s)
	s := p.NewRunState()
	if err := s.SetFormula(99, dag.FormulaFailed, -1); err == nil {
		t.Error("out of range formula accepted")
	}
	if err := s.SetFormula(0, "exploded", -1); err == nil {
		t.Error("unknown state accepted")
	}
	if err := s.SetNode(0, 9, dag.NodeFailed); err == nil {
		t.Error("out of range node accepted")
	}
	if d := p.StepAfter(s, -1); !d.Empty() {
		t.Error("StepAfter on a bad index decided something")
	}
}
