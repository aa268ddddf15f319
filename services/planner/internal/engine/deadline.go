package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Deadlines. A composition's timeout bounds the whole run from its
// acceptance (and from each retry); a formula's bounds its nodes from its
// dispatch. The planner keeps the instants where a restarted planner
// finds them (the composition's in the workflow record, the formulas' in
// the run snapshot) and looks at them at least every tick of
// ExpireDeadlines, re-armed from the records whenever a run is loaded.
//
// Past the composition's deadline the run stops as a cancel does (what
// has not started is cancelled, executors kill what runs, nothing new
// starts) and ends failed with the reason deadline once its running
// formulas have reported, or CancelWait after the deadline at the latest.
// Past a formula's, the planner asks the executors to stop that formula
// (WorkflowEvent.Stopping, RunSnapshot.Expired): they kill its nodes and
// report it failed, with the reason deadline, and the run's on_failure
// applies as to any failure. A formula no executor has taken fails at
// once; one whose executor gives no outcome fails CancelWait later.

// setDeadline starts the composition's timeout at now.
func (rec *Record) setDeadline(now time.Time) {
	rec.Deadline = nil
	if t := rec.Composition.Timeout; t > 0 {
		at := now.Add(t.D())
		rec.Deadline = &at
	}
}

// stopping says the run is being stopped (cancelled, or past its
// deadline) and has not ended yet.
func (r *run) stopping() bool {
	return (r.rec.CancelledBy != nil || r.rec.Expired != "") && !r.rec.Status.Terminal()
}

// expired says formula id's timeout passed in this generation.
func (r *run) expired(id string) bool { return slices.Contains(r.snap.Expired, id) }

// dispatched says a formula in state st is in an executor's hands (or on
// its way to one).
func dispatched(st dag.FormulaState) bool {
	return st == dag.FormulaReady || st == dag.FormulaRunning
}

// dispatched notes what a formula's dispatch starts: its timeout, and the
// wait for an executor to take it.
func (e *Engine) dispatched(r *run, i int, now time.Time) {
	pf := &r.plan.Formulas[i]
	if pf.Timeout > 0 {
		if _, ok := r.snap.Deadlines[pf.ID]; !ok { // a dispatch made again keeps its first
			if r.snap.Deadlines == nil {
				r.snap.Deadlines = map[string]time.Time{}
			}
			r.snap.Deadlines[pf.ID] = now.Add(pf.Timeout.D())
		}
	}
	e.await(r, i, now)
}

// arm notes when the run's next deadline is due (none: forgotten).
func (e *Engine) arm(r *run) {
	due, ok := e.nextDue(r)
	if !ok {
		delete(e.timers, r.rec.ID)
		return
	}
	if e.timers == nil {
		e.timers = map[string]time.Time{}
	}
	e.timers[r.rec.ID] = due
}

// nextDue is when something of the run's deadlines is due next: the
// composition's deadline, a dispatched formula's, or the end of the wait
// for the outcome of a formula whose timeout passed. A run being stopped
// has only the cancel wait (ExpireCancels).
func (e *Engine) nextDue(r *run) (time.Time, bool) {
	var due time.Time
	at := func(t time.Time) {
		if due.IsZero() || t.Before(due) {
			due = t
		}
	}
	if r.rec.Status.Terminal() || r.stopping() {
		return due, false
	}
	if d := r.rec.Deadline; d != nil {
		at(*d)
	}
	for id, t := range r.snap.Deadlines {
		i, ok := r.plan.Index(id)
		if !ok || !dispatched(r.state.Formula(i)) {
			continue
		}
		if r.expired(id) {
			t = t.Add(e.cancelWait())
		}
		at(t)
	}
	return due, !due.IsZero()
}

// ExpireDeadlines acts on every deadline that has passed: the
// composition's (the run stops, and fails with the reason deadline) and
// the formulas' (each is stopped on its host and fails with the reason
// deadline; see above). A run whose records cannot be written now is
// looked at again at the next call.
func (e *Engine) ExpireDeadlines(ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for _, id := range passed(e.timers, now) {
		err := e.unit(ctx, func() error {
			r, err := e.load(ctx, id)
			if err != nil {
				return err
			}
			if r == nil {
				delete(e.timers, id)
				return nil
			}
			if err := e.deadlines(ctx, r, now); err != nil {
				return err
			}
			e.arm(r)
			return nil
		})
		if err != nil {
			e.Log.Warn("cannot act on a deadline that passed; trying again", "workflow_id", id, "err", err)
			if e.timers == nil {
				e.timers = map[string]time.Time{}
			}
			e.timers[id] = now // looked at again next time
		}
	}
}

// deadlines acts on what of the run's deadlines has passed at now.
func (e *Engine) deadlines(ctx context.Context, r *run, now time.Time) error {
	if r.rec.Status.Terminal() || r.stopping() {
		return nil
	}
	if d := r.rec.Deadline; d != nil && !now.Before(*d) {
		return e.passDeadline(ctx, r)
	}
	var ids []string
	for id := range r.snap.Deadlines {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		i, _ := r.plan.Index(a)
		k, _ := r.plan.Index(b)
		return i - k
	})
	for _, id := range ids {
		if r.rec.Status.Terminal() || r.stopping() {
			return nil // a failure before this one ended the run
		}
		i, ok := r.plan.Index(id)
		if !ok || !dispatched(r.state.Formula(i)) {
			continue
		}
		at := r.snap.Deadlines[id]
		switch {
		case !r.expired(id) && !now.Before(at):
			if err := e.expireFormula(ctx, r, i); err != nil {
				return err
			}
		case r.expired(id) && !now.Before(at.Add(e.cancelWait())):
			why := fmt.Sprintf("%s; no outcome from its executor within %s: an executor that picks up its work later stops what still runs on the host",
				formulaDeadline(&r.plan.Formulas[i]), e.cancelWait())
			if err := e.failFormula(ctx, r, i, why, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

// formulaDeadline is the reason a formula fails when its timeout passes.
func formulaDeadline(pf *dag.PlannedFormula) string {
	return fmt.Sprintf("%s: formula %s's timeout of %s passed", events.ReasonDeadline, pf.ID, pf.Timeout)
}

// passDeadline stops a run whose composition's timeout has passed.
func (e *Engine) passDeadline(ctx context.Context, r *run) error {
	var unfinished []string
	for _, i := range r.plan.Order {
		if !r.state.Finished(i) {
			unfinished = append(unfinished, r.plan.Formulas[i].ID)
		}
	}
	if len(unfinished) == 0 {
		return nil // ending by itself
	}
	timeout := r.rec.Composition.Timeout
	names := strings.Join(unfinished, ", ")
	if len(unfinished) > 5 {
		names = strings.Join(unfinished[:5], ", ") + fmt.Sprintf(" and %d more", len(unfinished)-5)
	}
	r.rec.Expired = fmt.Sprintf("%s: the composition's timeout of %s passed with %d formula(s) unfinished (%s)", events.ReasonDeadline, timeout, len(unfinished), names)
	e.Log.Warn("workflow past its deadline: stopping it", "workflow_id", r.rec.ID, "timeout", timeout.String(), "unfinished", len(unfinished))
	return e.stop(ctx, r, fmt.Sprintf("not started: the composition's timeout of %s passed", timeout))
}

// expireFormula acts on formula i's timeout having passed: a formula no
// executor has taken fails here at once; otherwise its executors are
// asked to stop it (they report it failed).
func (e *Engine) expireFormula(ctx context.Context, r *run, i int) error {
	pf := &r.plan.Formulas[i]
	reason := formulaDeadline(pf)
	if r.state.Formula(i) == dag.FormulaReady {
		if why, ok := e.untaken(ctx, r, i, map[string]events.Takers{}); ok {
			r.snap.Expired = append(r.snap.Expired, pf.ID)
			return e.failFormula(ctx, r, i, reason+" before any executor took its work ("+why+")", "not started: its formula's timeout passed before any executor took its work")
		}
	}
	r.snap.Expired = append(r.snap.Expired, pf.ID)
	e.Log.Info("formula past its deadline: stopping it", "workflow_id", r.rec.ID, "formula", pf.ID, "timeout", pf.Timeout.String())
	now := e.now()
	ev := &events.WorkflowEvent{Ref: events.Ref{WorkflowID: r.rec.ID, Workflow: r.rec.Name, Operation: r.rec.Operation, Generation: r.rec.Generation},
		Status: dag.WorkflowRunning, Reason: reason + ": stopping it", Run: events.Run{Attempt: r.rec.Generation, StartedAt: &now}, Stopping: []string{pf.ID}}
	e.Out.Emit(r.workflowCtx(ctx), events.WorkflowLifecycle(r.rec.ID), ev, e.msgID(r, "workflow", "stopping", pf.ID))
	e.touched(r)
	return nil
}

// failFormula fails formula i here, with why as its error (and, when
// nodeReason is given, each of its nodes cancelled with it: none ran),
// and steps the run on the failure.
func (e *Engine) failFormula(ctx context.Context, r *run, i int, why, nodeReason string) error {
	pf := &r.plan.Formulas[i]
	if err := r.state.SetFormula(i, dag.FormulaFailed, -1); err != nil {
		return fmt.Errorf("fail %s: %w", pf.ID, err)
	}
	delete(e.waiting, waitKey{r.rec.ID, r.rec.Generation, pf.ID})
	e.recordFormula(ctx, r, i, dag.FormulaFailed)
	fctx := r.formulaCtx(ctx, i)
	if nodeReason != "" {
		for j := range pf.Nodes {
			ev := &events.NodeEvent{Ref: e.ref(r, i), Status: dag.NodeCancelled, SpecHash: pf.Nodes[j].SpecHash, Reason: nodeReason}
			ev.Node = pf.Nodes[j].Name
			e.Out.Emit(fctx, events.HostLifecycle(pf.Server), ev, e.msgID(r, pf.ID, ev.Node, string(dag.NodeCancelled)))
		}
	}
	ev := e.formulaEvent(r, i, dag.FormulaFailed, "")
	ev.Error = why
	e.Out.Emit(fctx, events.HostLifecycle(pf.Server), ev, e.msgID(r, pf.ID, string(dag.FormulaFailed)))
	e.Log.Warn("formula failed: its timeout passed", "workflow_id", r.rec.ID, "formula", pf.ID, "why", why)
	e.rolloutFinish(ctx, r, i)
	return e.act(ctx, r, r.plan.StepAfter(r.state, i))
}

// passed is the workflows of m whose instant is not after now, in order.
func passed(m map[string]time.Time, now time.Time) []string {
	var due []string
	for id, at := range m {
		if !now.Before(at) {
			due = append(due, id)
		}
	}
	slices.Sort(due)
	return due
}
