package dag

import "fmt"

// RunState is what has happened so far in one run of a plan: the state of
// each formula and node, and what blocked each blocked formula. It is kept
// apart from the Plan (the topology) and changed only through its methods,
// which keep the counters that make Step cheap.
type RunState struct {
	plan     *Plan
	formulas []FormulaState
	blocker  []int // plan index of the formula whose failure blocked this one, or -1
	nodes    [][]NodeState
	pending  int // formulas in FormulaPending
	open     int // formulas not yet finished (see finished)
	failures int // formulas failed or unhealthy

	carried []bool // failures a retry carried over (see Carry); nil when none
	kept    int    // how many of failures are carried
}

// NewRunState returns the state of a run that has not started: every
// formula and node pending.
func (p *Plan) NewRunState() *RunState {
	s := &RunState{
		plan:     p,
		formulas: make([]FormulaState, len(p.Formulas)),
		blocker:  make([]int, len(p.Formulas)),
		nodes:    make([][]NodeState, len(p.Formulas)),
		pending:  len(p.Formulas),
		open:     len(p.Formulas),
	}
	for i := range p.Formulas {
		s.formulas[i] = FormulaPending
		s.blocker[i] = -1
		s.nodes[i] = make([]NodeState, len(p.Formulas[i].Nodes))
		for j := range s.nodes[i] {
			s.nodes[i][j] = NodePending
		}
	}
	return s
}

// Formula returns the state of plan formula i.
func (s *RunState) Formula(i int) FormulaState { return s.formulas[i] }

// Blocker returns the plan index of the formula whose failure blocked i, or -1.
func (s *RunState) Blocker(i int) int { return s.blocker[i] }

// Nodes returns the node states of plan formula i (the caller may read them,
// and change them only through SetNode).
func (s *RunState) Nodes(i int) []NodeState { return s.nodes[i] }

// Failures counts formulas that failed or turned unhealthy.
func (s *RunState) Failures() int { return s.failures }

// SetFormula records formula i's new state. blocker is the plan index of
// the failed formula that blocked it (only for FormulaBlocked), else -1.
func (s *RunState) SetFormula(i int, st FormulaState, blocker int) error {
	if i < 0 || i >= len(s.formulas) {
		return fmt.Errorf("formula index %d out of range", i)
	}
	if !st.Valid() {
		return fmt.Errorf("formula %q: unknown state %q", s.plan.Formulas[i].ID, st)
	}
	old := s.formulas[i]
	if old == st {
		return nil
	}
	s.count(i, old, -1)
	if s.carried != nil && s.carried[i] {
		s.carried[i] = false
		s.kept--
	}
	s.formulas[i] = st
	s.count(i, st, +1)
	if st == FormulaBlocked {
		s.blocker[i] = blocker
	}
	return nil
}

// SetNode records node j of formula i.
func (s *RunState) SetNode(i, j int, st NodeState) error {
	if i < 0 || i >= len(s.nodes) || j < 0 || j >= len(s.nodes[i]) {
		return fmt.Errorf("node index %d/%d out of range", i, j)
	}
	if !st.Valid() {
		return fmt.Errorf("node %q: unknown state %q", s.plan.Formulas[i].Nodes[j].Name, st)
	}
	s.nodes[i][j] = st
	return nil
}

func (s *RunState) count(i int, st FormulaState, d int) {
	if st == FormulaPending {
		s.pending += d
	}
	if !s.finished(i, st) {
		s.open += d
	}
	if st == FormulaFailed || st == FormulaUnhealthy {
		s.failures += d
	}
}

// finished reports whether formula i in state st needs nothing more: a
// succeeded formula with a health gate still has to be gated.
func (s *RunState) finished(i int, st FormulaState) bool {
	switch st {
	case FormulaHealthy, FormulaUnhealthy, FormulaFailed, FormulaBlocked, FormulaCancelled:
		return true
	case FormulaSucceeded:
		return s.plan.Formulas[i].Gate == nil
	}
	return false
}

// Decision is what a run must do next.
type Decision struct {
	// Dispatch: pending formulas whose prerequisites are met.
	Dispatch []int
	// Gate: succeeded formulas whose health gate must now run.
	Gate []int
	// Blocked: pending formulas that can never start, each with the failed
	// formula that blocked it (transitively: the root cause).
	Blocked []Blocked
	// Cancelled: pending formulas that will not start because on_failure
	// is stop (or rollback) and something failed.
	Cancelled []Blocked
	// Done: every formula has finished; Result says how the run ended.
	Done   bool
	Result WorkflowState
}

// Blocked names a formula that cannot start and the failure that caused it.
type Blocked struct {
	Formula int
	Blocker int
}

// Empty reports whether the decision asks for nothing.
func (d *Decision) Empty() bool {
	return len(d.Dispatch) == 0 && len(d.Gate) == 0 && len(d.Blocked) == 0 && len(d.Cancelled) == 0 && !d.Done
}

// depVerdict says whether prerequisite dep is satisfied, failed for good
// (and the root failure), or still to come.
func (s *RunState) depVerdict(dep Dep) (ok bool, root int) {
	if dep.Condition == ConditionRollout {
		return s.batchVerdict(dep)
	}
	st := s.formulas[dep.Formula]
	switch st {
	case FormulaFailed, FormulaCancelled:
		return false, dep.Formula
	case FormulaBlocked:
		if b := s.blocker[dep.Formula]; b >= 0 {
			return false, b
		}
		return false, dep.Formula
	case FormulaUnhealthy:
		if dep.Condition == ConditionHealthy {
			return false, dep.Formula
		}
		return true, -1
	case FormulaHealthy:
		return true, -1
	case FormulaSucceeded, FormulaGating:
		if dep.Condition == ConditionCompleted || s.plan.Formulas[dep.Formula].Gate == nil {
			return true, -1
		}
	}
	return false, -1
}

// readiness of a pending formula: ready, blocked (by root) or waiting.
func (s *RunState) readiness(i int) (ready bool, root int) {
	ready = true
	for _, d := range s.plan.Formulas[i].Deps {
		ok, r := s.depVerdict(d)
		if r >= 0 {
			return false, r
		}
		if !ok {
			ready = false
		}
	}
	return ready, -1
}

func (s *RunState) stopping() bool {
	// Failures a retry carries over, and those within a rollout's
	// max_failed, do not stop the run (it still ends failed).
	return s.failures > s.kept+s.tolerated() && s.plan.OnFailure != OnFailureContinue
}

// batchVerdict is a rollout dependency on an instance of the previous
// batch: met once it has finished and passed its gate, or failed while the
// rollout's failures are within its max_failed; failed for good (with the
// rollout's first failure) once they are not.
func (s *RunState) batchVerdict(dep Dep) (ok bool, root int) {
	pf := &s.plan.Formulas[dep.Formula]
	if first, over := s.rolloutFailures(pf.Instance); over {
		return false, first
	}
	switch st := s.formulas[dep.Formula]; st {
	case FormulaHealthy, FormulaFailed, FormulaUnhealthy:
		return true, -1
	case FormulaSucceeded:
		return pf.Gate == nil, -1
	case FormulaCancelled:
		return false, dep.Formula
	case FormulaBlocked:
		if b := s.blocker[dep.Formula]; b >= 0 {
			return false, b
		}
		return false, dep.Formula
	}
	return false, -1
}

// rolloutFailures counts the failed instances of a rollout and says
// whether they are past its max_failed, with the first of them.
func (s *RunState) rolloutFailures(in *Instance) (first int, over bool) {
	first, n := -1, 0
	for _, i := range s.plan.rollouts[in.Of] {
		if st := s.formulas[i]; st == FormulaFailed || st == FormulaUnhealthy {
			n++
			if first < 0 {
				first = i
			}
		}
	}
	return first, n > in.MaxFailed
}

// tolerated counts the failures rollouts allow: failed instances of a
// rollout within its max_failed do not stop the run (it still ends
// failed). One a retry carried is not counted: kept has it already.
func (s *RunState) tolerated() int {
	n := 0
	for _, idx := range s.plan.rollouts {
		in := s.plan.Formulas[idx[0]].Instance
		failed := 0
		for _, i := range idx {
			if st := s.formulas[i]; st == FormulaFailed || st == FormulaUnhealthy {
				failed++
			}
		}
		if failed <= in.MaxFailed {
			for _, i := range idx {
				if st := s.formulas[i]; (st == FormulaFailed || st == FormulaUnhealthy) && !s.Carried(i) {
					n++ // a carried one is counted in kept already
				}
			}
		}
	}
	return n
}

// Rollout says, for an instance of a rollout, how many of its instances
// failed and whether that is past max_failed.
func (s *RunState) Rollout(i int) (failed int, over bool) {
	in := s.plan.Formulas[i].Instance
	if in == nil || in.Batches == 0 {
		return 0, false
	}
	for _, k := range s.plan.rollouts[in.Of] {
		if st := s.formulas[k]; st == FormulaFailed || st == FormulaUnhealthy {
			failed++
		}
	}
	return failed, failed > in.MaxFailed
}

// Step looks at the whole run and says what to do next. It is pure: it
// reads s and returns the decision without changing anything; the caller
// records what it acts on with SetFormula. It costs O(formulas + edges);
// StepAfter does the same work for one change in O(its neighbourhood).
func (p *Plan) Step(s *RunState) Decision {
	var d Decision
	stop := s.stopping()
	// Blocking is transitive: walk in topological order, treating formulas
	// blocked earlier in this same pass as blocked.
	var newly map[int]int
	for _, i := range p.Order {
		switch s.formulas[i] {
		case FormulaPending:
			ready, root := s.readiness(i)
			if root < 0 && newly != nil {
				for _, dep := range p.Formulas[i].Deps {
					if r, ok := newly[dep.Formula]; ok {
						root = r
						break
					}
				}
			}
			switch {
			case root >= 0:
				if newly == nil {
					newly = make(map[int]int)
				}
				newly[i] = root
				d.Blocked = append(d.Blocked, Blocked{Formula: i, Blocker: root})
			case stop:
				d.Cancelled = append(d.Cancelled, Blocked{Formula: i, Blocker: p.firstFailure(s)})
			case ready:
				d.Dispatch = append(d.Dispatch, i)
			}
		case FormulaSucceeded:
			if p.Formulas[i].Gate != nil {
				d.Gate = append(d.Gate, i)
			}
		}
	}
	p.finish(s, &d)
	return d
}

// StepAfter is Step after a single change: formula changed has just been
// set to its current state. It only looks at what that change can affect,
// so it is cheap enough to call on every event. It returns the same
// decision Step would, provided every earlier decision was recorded.
func (p *Plan) StepAfter(s *RunState, changed int) Decision {
	var d Decision
	if changed < 0 || changed >= len(p.Formulas) {
		return d
	}
	st := s.formulas[changed]
	if st == FormulaSucceeded && p.Formulas[changed].Gate != nil {
		d.Gate = append(d.Gate, changed)
	}
	stop := s.stopping()
	var seen map[int]bool
	// Dependents of the change may now be ready or blocked; blocking
	// spreads to their dependents in turn.
	type item struct{ f, root int }
	queue := make([]item, 0, len(p.Formulas[changed].Dependents))
	for _, k := range p.Formulas[changed].Dependents {
		queue = append(queue, item{k, -1})
	}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		if s.formulas[it.f] != FormulaPending || seen[it.f] {
			continue
		}
		ready, root := s.readiness(it.f)
		if root < 0 {
			root = it.root
		}
		switch {
		case root >= 0:
			if seen == nil {
				seen = make(map[int]bool)
			}
			seen[it.f] = true
			d.Blocked = append(d.Blocked, Blocked{Formula: it.f, Blocker: root})
			for _, k := range p.Formulas[it.f].Dependents {
				queue = append(queue, item{k, root})
			}
		case ready && !stop:
			d.Dispatch = append(d.Dispatch, it.f)
		}
	}
	if stop && s.pending > len(d.Blocked) {
		// Something failed and the policy stops the run: nothing pending
		// will start.
		first := p.firstFailure(s)
		for _, i := range p.Order {
			if s.formulas[i] == FormulaPending && !seen[i] {
				d.Cancelled = append(d.Cancelled, Blocked{Formula: i, Blocker: first})
			}
		}
	}
	p.finish(s, &d)
	return d
}

func (p *Plan) firstFailure(s *RunState) int {
	for _, i := range p.Order {
		if st := s.formulas[i]; (st == FormulaFailed || st == FormulaUnhealthy) && !s.Carried(i) {
			return i
		}
	}
	return -1
}

// finish sets Done and Result when the decision leaves nothing to wait for.
func (p *Plan) finish(s *RunState, d *Decision) {
	if len(d.Dispatch) > 0 || len(d.Gate) > 0 {
		return
	}
	// Formulas the decision blocks or cancels finish with it.
	if s.open-len(d.Blocked)-len(d.Cancelled) > 0 {
		return
	}
	d.Done = true
	d.Result = WorkflowSucceeded
	if s.failures > 0 || len(d.Blocked) > 0 || len(d.Cancelled) > 0 {
		d.Result = WorkflowFailed
		return
	}
	for i := range s.formulas {
		if st := s.formulas[i]; st != FormulaHealthy && st != FormulaSucceeded {
			d.Result = WorkflowFailed
			return
		}
	}
}

// Apply records a decision in s the way a planner acts on it: dispatched
// formulas become ready, gated ones gating, and blocked or cancelled ones
// take those states with their blocker.
func (s *RunState) Apply(d Decision) {
	for _, i := range d.Dispatch {
		_ = s.SetFormula(i, FormulaReady, -1)
	}
	for _, i := range d.Gate {
		_ = s.SetFormula(i, FormulaGating, -1)
	}
	for _, b := range d.Blocked {
		_ = s.SetFormula(b.Formula, FormulaBlocked, b.Blocker)
	}
	for _, b := range d.Cancelled {
		_ = s.SetFormula(b.Formula, FormulaCancelled, b.Blocker)
	}
}

// RolledOut reports whether plan formula i runs in a rollout's batches in
// this plan: an instance of a group formula with a rollout, in a create
// (delete and check runs take instances in dependency order only).
func (p *Plan) RolledOut(i int) bool {
	in := p.Formulas[i].Instance
	return in != nil && len(p.rollouts[in.Of]) > 0
}

// RolloutInstances lists the plan indexes of a rollout's instances (the
// group formula's id as written), in host order.
func (p *Plan) RolloutInstances(of string) []int { return p.rollouts[of] }

// Finished reports whether formula i needs nothing more in this run.
func (s *RunState) Finished(i int) bool { return s.finished(i, s.formulas[i]) }
