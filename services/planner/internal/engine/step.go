package engine

import (
	"context"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

func (e *Engine) handle(ctx context.Context, ev *consume.Event) error {
	switch ev.Type.Family() {
	case events.FamilyFormula:
		var f events.FormulaEvent
		if err := events.DecodeData(ev.Envelope, &f); err != nil {
			return err
		}
		switch f.Status { // the executor's transitions; the rest are the planner's own
		case dag.FormulaRunning, dag.FormulaSucceeded, dag.FormulaFailed, dag.FormulaCancelled:
			return e.apply(ctx, f.Ref, f.Status, f.StartedAt)
		}
	case events.FamilyHealth:
		var h events.HealthEvent
		if err := events.DecodeData(ev.Envelope, &h); err != nil {
			return err
		}
		if !h.Final {
			return nil
		}
		if h.Status == events.HealthPass {
			return e.apply(ctx, h.Ref, dag.FormulaHealthy, h.StartedAt)
		}
		return e.apply(ctx, h.Ref, dag.FormulaUnhealthy, h.StartedAt)
	}
	// Node outcomes are the executor's records (gantry_nodes), read where
	// needed (rollback); runs are stepped on formula outcomes.
	return nil
}

// apply moves the formula an event is about to st, if the event is about a
// known run's current generation. started is when the event says the
// work it reports began (for the formula's span, when this planner did
// not see its dispatch).
func (e *Engine) apply(ctx context.Context, ref events.Ref, st dag.FormulaState, started *time.Time) error {
	r, i, ok, err := e.target(ctx, ref)
	if !ok || err != nil {
		return err
	}
	if started != nil {
		e.formulaStarted(r, i, *started)
	}
	return e.transition(ctx, r, i, st)
}

// target finds the run and formula an event is about. ok is false for an
// event to ignore: an unknown workflow or formula, or an older generation.
func (e *Engine) target(ctx context.Context, ref events.Ref) (*run, int, bool, error) {
	r, err := e.load(ctx, ref.WorkflowID)
	if err != nil {
		return nil, 0, false, err
	}
	if r == nil {
		e.Log.Warn("event for an unknown workflow ignored", "workflow_id", ref.WorkflowID, "formula", ref.Formula)
		return nil, 0, false, nil
	}
	if ref.Generation != r.rec.Generation || r.rec.Status == dag.WorkflowCancelled || (r.rec.Status.Terminal() && r.rec.Expired != "") {
		return nil, 0, false, nil
	}
	i, ok := r.plan.Index(ref.Formula)
	if !ok {
		e.Log.Warn("event for an unknown formula ignored", "workflow_id", ref.WorkflowID, "formula", ref.Formula)
		return nil, 0, false, nil
	}
	if server := r.plan.Formulas[i].Server; ref.Host != server {
		e.Log.Warn("event refused: about another host than its formula's", "security", true, "workflow_id", ref.WorkflowID,
			"formula", ref.Formula, "host", ref.Host, "formula_host", server)
		return nil, 0, false, nil
	}
	return r, i, true, nil
}

// transition moves formula i to st when that is ahead of its state
// (dag.CompareFormula; target has kept the run's generation only): a
// redelivered, repeated or late event changes nothing, and the first end
// of a formula is the one the run goes by (an executor's report after
// the planner cancelled it changes nothing).
func (e *Engine) transition(ctx context.Context, r *run, i int, st dag.FormulaState) error {
	cur := r.state.Formula(i)
	if dag.CompareFormula(dag.FormulaMark{State: cur}, dag.FormulaMark{State: st}) != dag.Ahead {
		return nil
	}
	gated := st == dag.FormulaHealthy || st == dag.FormulaUnhealthy
	if gated && cur != dag.FormulaGating {
		return nil
	}
	if err := r.state.SetFormula(i, st, -1); err != nil {
		return consume.Poison(err)
	}
	if formulaFinal(r, i, st) {
		e.recordFormula(ctx, r, i, st)
	}
	if st != dag.FormulaReady {
		delete(e.waiting, waitKey{r.rec.ID, r.rec.Generation, r.plan.Formulas[i].ID})
	}
	if r.stopping() {
		return e.settleCancel(ctx, r) // nothing new starts, no gate is checked
	}
	if gated {
		e.publishFormula(ctx, r, i, st, "")
	}
	e.rolloutFinish(ctx, r, i)
	d := r.plan.StepAfter(r.state, i)
	if st == dag.FormulaRunning && d.Empty() {
		return nil // nothing follows from "running"; the snapshot may keep "ready"
	}
	return e.act(ctx, r, d)
}

// act turns a decision into events and work, and marks the run to be
// saved: the unit of work publishes them all before it records anything.
func (e *Engine) act(ctx context.Context, r *run, d dag.Decision) error {
	if r.rec.Status == dag.WorkflowPaused {
		d.Dispatch = nil // nothing new starts while paused; resume steps again
	}
	for _, i := range d.Dispatch {
		e.dispatch(ctx, r, i)
	}
	for _, i := range d.Gate {
		e.gate(ctx, r, i)
	}
	for _, b := range d.Blocked {
		e.stopFormula(ctx, r, b, dag.FormulaBlocked, dag.NodeBlocked)
	}
	for _, b := range d.Cancelled {
		e.stopFormula(ctx, r, b, dag.FormulaCancelled, dag.NodeCancelled)
	}
	e.rolloutStarts(ctx, r, d)
	r.state.Apply(d)
	e.touched(r)
	if d.Done {
		return e.finish(ctx, r, d.Result)
	}
	return nil
}

func (e *Engine) finish(ctx context.Context, r *run, result dag.WorkflowState) error {
	reason := ""
	if result == dag.WorkflowFailed {
		if k := firstFailed(r); k >= 0 {
			reason = "formula " + r.plan.Formulas[k].ID + " failed"
			if r.expired(r.plan.Formulas[k].ID) {
				reason += ": deadline: its timeout of " + r.plan.Formulas[k].Timeout.String() + " passed"
			}
			if why := rolloutStop(r, k); why != "" {
				reason = why
			}
		}
	}
	switch {
	case r.rec.Rollback == nil && result == dag.WorkflowFailed && r.rec.Composition.OnFailure == dag.OnFailureRollback:
		return e.startRollback(ctx, r, reason)
	case r.rec.Rollback != nil:
		var err error
		if reason, err = e.rolledBack(ctx, r, result); err != nil {
			return err
		}
		result = dag.WorkflowFailed // however the rollback went
	}
	e.publishWorkflow(ctx, r, result, reason, nil)
	r.rec.Status = result
	r.snap.Status = result
	e.Log.Info("workflow finished", "workflow_id", r.rec.ID, "status", result, "reason", reason)
	return e.saveRecord(ctx, r)
}

func firstFailed(r *run) int {
	for _, i := range r.plan.Order {
		switch r.state.Formula(i) {
		case dag.FormulaFailed, dag.FormulaUnhealthy:
			return i
		}
	}
	return -1
}
