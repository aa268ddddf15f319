package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Rollouts: the instances of a group formula with a rollout run in
// batches (pkg/dag decides when each may start). The planner says so on
// workflow.<id>.lifecycle: a batch started (its first instance
// dispatched), a batch finished (every instance finished and gated), the
// rollout stopped (past max_failed: no further batch starts). Message ids
// are per rollout and batch, so a decision made again announces nothing
// new.

// rolloutStarts announces the batches a decision starts.
func (e *Engine) rolloutStarts(ctx context.Context, r *run, d dag.Decision) {
	for _, i := range d.Dispatch {
		if !r.plan.RolledOut(i) {
			continue
		}
		e.rolloutEvent(ctx, r, i, events.RolloutBatchStarted, "")
	}
	stopped := map[string]bool{}
	for _, b := range d.Blocked {
		if !r.plan.RolledOut(b.Formula) {
			continue
		}
		in := r.plan.Formulas[b.Formula].Instance
		if stopped[in.Of] {
			continue
		}
		if why := rolloutStop(r, b.Formula); why != "" {
			stopped[in.Of] = true
			e.rolloutEvent(ctx, r, b.Formula, events.RolloutStopped, why)
		}
	}
}

// rolloutFinish announces the end of formula i's batch, if i was the last
// of it to finish.
func (e *Engine) rolloutFinish(ctx context.Context, r *run, i int) {
	if !r.plan.RolledOut(i) || !r.state.Finished(i) {
		return
	}
	for _, k := range batchOf(r.plan, i) {
		if !r.state.Finished(k) {
			return
		}
	}
	e.rolloutEvent(ctx, r, i, events.RolloutBatchFinished, "")
}

// batchOf lists the instances in formula i's batch.
func batchOf(p *dag.Plan, i int) []int {
	in := p.Formulas[i].Instance
	var out []int
	for _, k := range p.RolloutInstances(in.Of) {
		if p.Formulas[k].Instance.Batch == in.Batch {
			out = append(out, k)
		}
	}
	return out
}

func (e *Engine) rolloutEvent(ctx context.Context, r *run, i int, st events.RolloutStatus, reason string) {
	in := r.plan.Formulas[i].Instance
	now := e.now()
	ev := &events.RolloutEvent{Ref: events.Ref{WorkflowID: r.rec.ID, Workflow: r.rec.Name, Formula: in.Of, Operation: r.rec.Operation, Generation: r.rec.Generation},
		Status: st, Batch: in.Batch, Batches: in.Batches, MaxFailed: in.MaxFailed, Reason: reason, At: &now}
	for _, k := range batchOf(r.plan, i) {
		ev.Instances = append(ev.Instances, r.plan.Formulas[k].ID)
	}
	ev.Failed, _ = r.state.Rollout(i)
	id := []string{in.Of, "rollout", string(st)}
	if st != events.RolloutStopped {
		id = append(id, strconv.Itoa(in.Batch))
	}
	e.Out.Emit(r.workflowCtx(ctx), events.WorkflowLifecycle(r.rec.ID), ev, e.msgID(r, id...))
}

// rolloutStop says why instance i's rollout stopped ("" when it has not):
// more of its instances failed than max_failed allows.
func rolloutStop(r *run, i int) string {
	failed, over := r.state.Rollout(i)
	if !over {
		return ""
	}
	in := r.plan.Formulas[i].Instance
	var names []string
	last := 0
	for _, k := range r.plan.RolloutInstances(in.Of) {
		switch r.state.Formula(k) {
		case dag.FormulaFailed, dag.FormulaUnhealthy:
			names = append(names, r.plan.Formulas[k].ID)
			last = max(last, r.plan.Formulas[k].Instance.Batch)
		}
	}
	return fmt.Sprintf("rollout of %s stopped after batch %d of %d: %d instance(s) failed (%s), max_failed %d",
		in.Of, last, in.Batches, failed, strings.Join(names, ", "), in.MaxFailed)
}
