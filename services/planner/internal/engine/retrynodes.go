package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// retryNodes starts a new generation that re-runs only the named failed
// nodes ("formula/node") and what depends on them (dag.RetryNodes decides
// what); every other failure stays failed, and still fails the run. A name
// that is not a failed node of the run is refused, and nothing starts.
func (e *Engine) retryNodes(ctx context.Context, r *run, refs []string, by *events.Principal) error {
	recorded := func(i, j int) (dag.NodeState, error) {
		pf := &r.plan.Formulas[i]
		return e.nodeState(ctx, r.rec.ID, r.plan.Operation, pf.ID, pf.Nodes[j].Name)
	}
	sc, err := r.plan.RetryNodes(r.state, refs, recorded)
	if errors.Is(err, dag.ErrRetryNode) {
		return refusal{err}
	}
	if err != nil {
		return err
	}
	rerun := make([]string, len(sc.Rerun))
	for k, i := range sc.Rerun {
		rerun[k] = r.plan.Formulas[i].ID
	}
	if err := r.rerun(rerun); err != nil {
		return err
	}
	r.rec.Held, r.rec.Carried = nil, nil
	for i, js := range sc.Hold {
		pf := &r.plan.Formulas[i]
		if r.rec.Held == nil {
			r.rec.Held = map[string][]string{}
		}
		for _, j := range js {
			r.rec.Held[pf.ID] = append(r.rec.Held[pf.ID], pf.Nodes[j].Name)
		}
	}
	for _, i := range sc.Carried {
		r.state.Carry(i)
		r.rec.Carried = append(r.rec.Carried, r.plan.Formulas[i].ID)
	}
	e.Log.Info("retry of nodes", "workflow_id", r.rec.ID, "nodes", refs, "formulas", len(sc.Rerun), "carried", r.rec.Carried)
	return e.nextGeneration(ctx, r, rerun, fmt.Sprintf("retry of %s: generation %d", strings.Join(refs, ", "), r.rec.Generation+1), by)
}

// carry marks again, after a load, the failures the current generation's
// retry carried over.
func (r *run) carry() {
	for _, id := range r.rec.Carried {
		if i, ok := r.plan.Index(id); ok {
			r.state.Carry(i)
		}
	}
}

// notRetried reports whether the current generation leaves a node as it
// was (a retry limited to other nodes).
func (r *run) notRetried(formula, node string) bool {
	for _, n := range r.rec.Held[formula] {
		if n == node {
			return true
		}
	}
	return false
}

// refusal is a request refused for what it asks: an ErrConflict whose
// message is only the reason.
type refusal struct{ error }

func (r refusal) Is(target error) bool { return target == ErrConflict }
func (r refusal) Unwrap() error        { return r.error }
