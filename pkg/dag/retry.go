package dag

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrRetryNode is wrapped by every reason a retry limited to nodes is
// refused: a name that is not "formula/node", a node the plan does not
// have, or a node that did not fail.
var ErrRetryNode = errors.New("cannot retry that node")

// RetryScope is what a retry limited to some failed nodes runs again.
// Everything else keeps the state the run left it in.
type RetryScope struct {
	// Rerun are the formulas to run again (set pending), in plan order:
	// those holding a named node, and the formulas that depend on them,
	// transitively, and had not completed. When no failure is left out,
	// also every formula the run did not complete (what on_failure stop or
	// a cancel kept from starting).
	Rerun []int
	// Hold maps a formula of Rerun to the nodes (by index) that do not run
	// again in it: the failed nodes that were not named, and every node not
	// done that does not depend on a named one. Nil when none is held.
	Hold map[int][]int
	// Carried are the failed or unhealthy formulas that stay so: they
	// still fail the run, but do not stop what is retried (see Carry).
	Carried []int
}

// ParseNodeRef splits "formula/node".
func ParseNodeRef(ref string) (formula, node string, err error) {
	f, n, ok := strings.Cut(ref, "/")
	switch {
	case !ok || f == "" || n == "":
		return "", "", fmt.Errorf("%w %q: name it as formula/node", ErrRetryNode, ref)
	case !IsToken(f):
		return "", "", fmt.Errorf("%w %q: formula %s", ErrRetryNode, ref, tokenProblem(f))
	case !IsToken(n):
		return "", "", fmt.Errorf("%w %q: node %s", ErrRetryNode, ref, tokenProblem(n))
	}
	return f, n, nil
}

// RetryNodes decides a retry that re-runs only the named failed nodes
// ("formula/node") and what depends on them: later nodes of the same
// formula that depend on one (transitively), and formulas that depend on
// its formula and had not completed. recorded says how a node's last
// attempt ended ("" when it never ran); a named node must have failed.
// Errors wrap ErrRetryNode, except recorded's own.
func (p *Plan) RetryNodes(s *RunState, refs []string, recorded func(formula, node int) (NodeState, error)) (RetryScope, error) {
	var sc RetryScope
	if len(refs) == 0 {
		return sc, fmt.Errorf("%w: no node named", ErrRetryNode)
	}
	named := map[int]map[int]bool{}
	for _, ref := range refs {
		fid, nname, err := ParseNodeRef(ref)
		if err != nil {
			return sc, err
		}
		i, ok := p.byID[fid]
		if !ok {
			return sc, fmt.Errorf("%w %s: the workflow has no formula %s", ErrRetryNode, ref, fid)
		}
		j := slices.IndexFunc(p.Formulas[i].Nodes, func(n PlannedNode) bool { return n.Name == nname })
		if j < 0 {
			return sc, fmt.Errorf("%w %s: formula %s has no node %s", ErrRetryNode, ref, fid, nname)
		}
		st, err := recorded(i, j)
		if err != nil {
			return sc, err
		}
		if st != NodeFailed {
			if st == "" {
				st = "never ran"
			}
			return sc, fmt.Errorf("%w %s: it did not fail (%s); only failed nodes can be retried", ErrRetryNode, ref, st)
		}
		if named[i] == nil {
			named[i] = map[int]bool{}
		}
		named[i][j] = true
	}
	// Inside each formula holding a named node: what runs again is the
	// named nodes and their dependents; failures not named are held.
	rerun := make([]bool, len(p.Formulas))
	left := false
	held := map[int][]int{}
	for i, ns := range named {
		rerun[i] = true
		pf := &p.Formulas[i]
		states := make([]NodeState, len(pf.Nodes))
		heldFailure := false
		for j := range pf.Nodes {
			st, err := recorded(i, j)
			if err != nil {
				return sc, err
			}
			states[j] = st
			if st == NodeFailed && !ns[j] {
				heldFailure = true
			}
		}
		if !heldFailure {
			continue // every failure of the formula is retried: it runs as a whole retry would
		}
		left = true
		in := nodeClosure(pf, ns)
		for j := range pf.Nodes {
			if !in[j] && !states[j].Done() {
				held[i] = append(held[i], j)
			}
		}
	}
	for i := range p.Formulas {
		if st := s.formulas[i]; !rerun[i] && (st == FormulaFailed || st == FormulaUnhealthy) {
			sc.Carried = append(sc.Carried, i)
			left = true
		}
	}
	// Formulas that depend on a retried one and had not completed.
	queue := make([]int, 0, len(named))
	for i := range named {
		queue = append(queue, i)
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, k := range p.Formulas[i].Dependents {
			if !rerun[k] && !completed(s.formulas[k]) {
				rerun[k] = true
				queue = append(queue, k)
			}
		}
	}
	if !left { // nothing else failed: what the failures kept from starting starts too
		for i := range p.Formulas {
			if st := s.formulas[i]; !completed(st) && st != FormulaFailed && st != FormulaUnhealthy {
				rerun[i] = true
			}
		}
	}
	for _, i := range p.Order {
		if rerun[i] {
			sc.Rerun = append(sc.Rerun, i)
		}
	}
	slices.Sort(sc.Rerun)
	if len(held) > 0 {
		sc.Hold = held
	}
	return sc, nil
}

// completed: the formula's work is in place (its gate, if any, aside).
func completed(st FormulaState) bool {
	switch st {
	case FormulaSucceeded, FormulaGating, FormulaHealthy:
		return true
	}
	return false
}

// nodeClosure is the named nodes of pf and every node that depends on one,
// transitively.
func nodeClosure(pf *PlannedFormula, named map[int]bool) []bool {
	in := make([]bool, len(pf.Nodes))
	var queue []int
	for j := range named {
		in[j] = true
		queue = append(queue, j)
	}
	for len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		for _, k := range pf.Nodes[j].Dependents {
			if !in[k] {
				in[k] = true
				queue = append(queue, k)
			}
		}
	}
	return in
}

// Carry marks failed or unhealthy formula i as a failure carried over from
// an earlier generation (a retry left it out): it still fails the run, but
// under on_failure stop it does not keep the retried formulas from
// starting. Setting the formula's state again ends the mark.
func (s *RunState) Carry(i int) {
	if i < 0 || i >= len(s.formulas) {
		return
	}
	if st := s.formulas[i]; st != FormulaFailed && st != FormulaUnhealthy {
		return
	}
	if s.carried == nil {
		s.carried = make([]bool, len(s.formulas))
	}
	if !s.carried[i] {
		s.carried[i] = true
		s.kept++
	}
}

// Carried reports whether formula i is a carried failure (see Carry).
func (s *RunState) Carried(i int) bool { return s.carried != nil && s.carried[i] }
