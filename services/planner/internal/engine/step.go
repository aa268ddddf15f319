package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// ErrEarlyVerdict: a health gate's verdict came before the formula's
// success that asked for it; it is delivered again later, once that
// success has been applied.
var ErrEarlyVerdict = errors.New("a health verdict came before its formula's gate was asked for")

// Ignores says whether the planner does nothing with events of type t,
// whatever they hold: every known type but formula and health events (of
// what its consumer takes, node and progress events). Node outcomes are the executor's
// records (gantry_nodes), read where needed (rollback); runs are stepped
// on formula outcomes and health verdicts. Its consumer passes them by
// unread (consume.Options.Skip); a type this version does not know is
// read, and refused as ever.
func Ignores(t events.Type) bool {
	f := t.Family()
	return t.Known() && f != events.FamilyFormula && f != events.FamilyHealth
}

func (e *Engine) handle(ctx context.Context, ev *consume.Event) error {
	if Ignores(ev.Type) {
		return nil
	}
	pl, err := ev.Payload()
	if err != nil {
		return err
	}
	switch p := pl.(type) {
	case *events.FormulaEvent:
		switch p.Status { // the executor's transitions; the rest are the planner's own
		case dag.FormulaRunning, dag.FormulaSucceeded, dag.FormulaFailed, dag.FormulaCancelled:
			return e.apply(ctx, p.Ref, p.Status, p.StartedAt, p.Error)
		}
	case *events.HealthEvent:
		if !p.Final {
			return nil
		}
		if p.Status == events.HealthPass {
			return e.apply(ctx, p.Ref, dag.FormulaHealthy, p.StartedAt, "")
		}
		return e.apply(ctx, p.Ref, dag.FormulaUnhealthy, p.StartedAt, p.GateFailure())
	}
	return nil
}

// apply moves the formula an event is about to st, if the event is about a
// known run's current generation. started is when the event says the
// work it reports began (for the formula's span, when this planner did
// not see its dispatch); why is why it failed, when it did.
func (e *Engine) apply(ctx context.Context, ref events.Ref, st dag.FormulaState, started *time.Time, why string) error {
	r, i, ok, err := e.target(ctx, ref)
	if !ok || err != nil {
		return err
	}
	if started != nil {
		e.formulaStarted(r, i, *started)
	}
	return e.transition(ctx, r, i, st, why)
}

// failedBecause keeps why formula id failed, for the workflow's reason
// (the first MaxFailureReasons formulas that failed, each bounded).
func (r *run) failedBecause(id, why string) {
	if _, ok := r.snap.Failures[id]; !ok && len(r.snap.Failures) >= events.MaxFailureReasons {
		return
	}
	if r.snap.Failures == nil {
		r.snap.Failures = map[string]string{}
	}
	if len(why) > events.MaxFailureReasonBytes {
		why = strings.ToValidUTF8(why[:events.MaxFailureReasonBytes-3], "") + "..."
	}
	r.snap.Failures[id] = why
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

// transition moves formula i to st (failed or unhealthy: because of why)
// when that is ahead of its state
// (dag.CompareFormula; target has kept the run's generation only): a
// redelivered, repeated or late event changes nothing, and the first end
// of a formula is the one the run goes by (an executor's report after
// the planner cancelled it changes nothing).
func (e *Engine) transition(ctx context.Context, r *run, i int, st dag.FormulaState, why string) error {
	cur := r.state.Formula(i)
	if dag.CompareFormula(dag.FormulaMark{State: cur}, dag.FormulaMark{State: st}) != dag.Ahead {
		return nil
	}
	gated := st == dag.FormulaHealthy || st == dag.FormulaUnhealthy
	if gated && cur != dag.FormulaGating {
		if dag.FormulaRank(cur) < dag.FormulaRank(dag.FormulaGating) {
			// The verdict came before the formula's success, which asked
			// for it: that event is being delivered again (a planner died
			// after it asked for the gate, before it recorded the run).
			// Dropped, it would not come again: the gate was asked for
			// once, under its message id.
			return fmt.Errorf("%w: formula %s is %s", ErrEarlyVerdict, r.plan.Formulas[i].ID, cur)
		}
		return nil
	}
	if why != "" && (st == dag.FormulaFailed || st == dag.FormulaUnhealthy) {
		r.failedBecause(r.plan.Formulas[i].ID, why) // for the workflow's reason
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
		ev := e.formulaEvent(r, i, st, "")
		if st == dag.FormulaUnhealthy {
			ev.Error = r.snap.Failures[r.plan.Formulas[i].ID] // why its gate failed
		}
		e.Out.Emit(r.formulaCtx(ctx, i), events.HostLifecycle(ev.Ref.Host), ev, e.msgID(r, r.plan.Formulas[i].ID, string(st)))
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
		reason = failedReason(r)
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

// maxNamedFailures is how many failed formulas a workflow's reason names;
// it counts the rest.
const maxNamedFailures = 5

// failedReason says why a run failed: every failed formula (up to
// maxNamedFailures, then how many more) with why it failed, "formula db:
// health gate failed after 3 checks: pg_isready: no response"; a rollout
// stopped past its max_failed says so once for its instances.
func failedReason(r *run) string {
	var said []string
	n := 0
	rollouts := map[string]bool{}
	for _, i := range r.plan.Order {
		switch r.state.Formula(i) {
		case dag.FormulaFailed, dag.FormulaUnhealthy:
		default:
			continue
		}
		n++
		if len(said) >= maxNamedFailures {
			continue
		}
		if why := rolloutStop(r, i); why != "" {
			if of := r.plan.Formulas[i].Instance.Of; !rollouts[of] {
				rollouts[of] = true
				said = append(said, why)
			}
			continue
		}
		said = append(said, formulaFailure(r, i))
	}
	switch {
	case n == 0:
		return ""
	case n == 1:
		return said[0]
	}
	reason := fmt.Sprintf("%d formulas failed: %s", n, strings.Join(said, "; "))
	if more := n - len(said); more > 0 && len(rollouts) == 0 {
		reason += fmt.Sprintf("; and %d more (gantry status %s lists them)", more, r.rec.ID)
	}
	return reason
}

// formulaFailure says why formula i failed: "formula a: node(s) failed:
// x", or "formula a failed" when nothing says why.
func formulaFailure(r *run, i int) string {
	pf := &r.plan.Formulas[i]
	switch why := r.snap.Failures[pf.ID]; {
	case r.expired(pf.ID):
		return "formula " + pf.ID + " failed: deadline: its timeout of " + pf.Timeout.String() + " passed"
	case why != "":
		return "formula " + pf.ID + ": " + why
	}
	return "formula " + pf.ID + " failed"
}
