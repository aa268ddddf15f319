package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// ErrNotFound and ErrConflict classify control failures for the reply.
var (
	ErrNotFound = errors.New("no such workflow")
	ErrConflict = errors.New("not possible in the workflow's state")
)

// ControlReply answers cancel, pause, resume and retry.
type ControlReply = events.ControlReply

// Control applies a verb to a workflow at the request of by.
func (e *Engine) Control(ctx context.Context, id, verb string, by events.Principal) (*ControlReply, error) {
	return e.ControlRequest(ctx, id, verb, events.ControlRequest{}, by)
}

// ControlRequest applies a verb with the request's options (a retry
// limited to nodes) to a workflow at the request of by.
func (e *Engine) ControlRequest(ctx context.Context, id, verb string, req events.ControlRequest, by events.Principal) (*ControlReply, error) {
	reply, err := e.control(ctx, id, verb, req, e.named(by))
	if e.healed(ctx, err) {
		return e.control(ctx, id, verb, req, e.named(by))
	}
	return reply, err
}

// controlTries bounds how often a control request is applied again after
// another planner replica wrote the run state first.
const controlTries = 3

// control applies a verb in a unit of work. A verb writes the workflow
// record, and the unit's commit then the run's snapshot; when another
// planner replica stepped the run in between (its snapshot write came
// first), the request is not failed: a verb whose record was written is
// finished from the state saved since (see finishControl); one whose
// record write lost is applied again (its events, with the same message
// ids, are stored once).
func (e *Engine) control(ctx context.Context, id, verb string, req events.ControlRequest, by events.Principal) (reply *ControlReply, err error) {
	if err := e.lockFor(ctx); err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	recorded := false
	for try := 1; ; try++ {
		var refused error
		err = e.unit(ctx, func() error {
			if recorded {
				reply, err = e.finishControl(ctx, id, verb)
				return err
			}
			reply, err = e.request(ctx, id, verb, req, &by)
			if errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
				// Refused for the state it found: what loading the run
				// repaired (a snapshot behind its record: a pause the
				// executors must read) is saved all the same.
				refused = err
				return nil
			}
			recorded = err == nil // its record is written (see finishControl)
			return err
		})
		if refused != nil {
			delete(e.cache, id) // the request's own changes in memory (its count) go
			return nil, refused
		}
		if !errors.Is(err, events.ErrChanged) || try == controlTries {
			return reply, err
		}
		e.Log.Info("control request met another planner replica's write; applying it again", "workflow_id", id, "verb", verb, "recorded", recorded)
	}
}

// finishControl completes a control request whose workflow record was written
// but whose run snapshot lost to another replica's: the load repairs the
// snapshot's status from the record (a pause reaches the executors), a
// running workflow is stepped (what a resume made ready starts), a
// stopping one is stopped again (its cancellations, with the same message
// ids). A retry's too: a snapshot still of the generation before is begun
// again from the record (beginAgain); one another replica wrote is read.
func (e *Engine) finishControl(ctx context.Context, id, verb string) (*ControlReply, error) {
	r, err := e.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w %s", ErrNotFound, id)
	}
	switch {
	case verb == events.VerbCancel && r.stopping():
		err = e.stop(ctx, r, "not started: the workflow was cancelled")
	case r.rec.Status == dag.WorkflowRunning:
		err = e.act(ctx, r, r.plan.Step(r.state))
	}
	if err != nil {
		return nil, err
	}
	return &ControlReply{WorkflowID: id, Status: r.rec.Status, Generation: r.rec.Generation}, nil
}

// request carries out a control verb.
func (e *Engine) request(ctx context.Context, id, verb string, req events.ControlRequest, by *events.Principal) (*ControlReply, error) {
	r, err := e.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if r == nil || r.rec.PrunedAt != nil {
		return nil, fmt.Errorf("%w %s", ErrNotFound, id)
	}
	st := r.rec.Status
	if r.stopping() {
		if r.rec.CancelledBy == nil {
			return nil, fmt.Errorf("%w: %s is stopping (its running formulas are being stopped): %s", ErrConflict, id, r.rec.Expired)
		}
		return nil, fmt.Errorf("%w: %s is being cancelled (its running formulas are being stopped)", ErrConflict, id)
	}
	r.rec.Requests++
	switch verb {
	case events.VerbCancel:
		if st.Terminal() {
			return nil, fmt.Errorf("%w: %s is already %s", ErrConflict, id, st)
		}
		err = e.cancel(ctx, r, by)
	case events.VerbPause:
		if st != dag.WorkflowRunning && st != dag.WorkflowAccepted {
			return nil, fmt.Errorf("%w: %s is %s; only a running workflow can be paused", ErrConflict, id, st)
		}
		err = e.pause(ctx, r, by)
	case events.VerbResume:
		if st != dag.WorkflowPaused {
			return nil, fmt.Errorf("%w: %s is %s, not paused", ErrConflict, id, st)
		}
		err = e.resume(ctx, r, by)
	case events.VerbRetry:
		if st != dag.WorkflowFailed && st != dag.WorkflowCancelled {
			return nil, fmt.Errorf("%w: %s is %s; only a failed or cancelled workflow can be retried", ErrConflict, id, st)
		}
		if r.rec.Rollback != nil {
			return nil, fmt.Errorf("%w: %s was rolled back; submit the composition again", ErrConflict, id)
		}
		if len(req.Nodes) > 0 {
			err = e.retryNodes(ctx, r, req.Nodes, by)
		} else {
			err = e.retry(ctx, r, by)
		}
	default:
		return nil, fmt.Errorf("%w: unknown verb %q", ErrConflict, verb)
	}
	if err != nil {
		return nil, err
	}
	return &ControlReply{WorkflowID: id, Status: r.rec.Status, Generation: r.rec.Generation}, nil
}

// PausedReason is the reason of a workflow's paused event: what a pause
// does.
const PausedReason = "paused by request: running nodes finish, no new node starts until resume"

// pause stops new nodes from starting: no formula is dispatched, and the
// executors hold the next nodes of the formulas they run (they read the
// run state, saved paused with this unit of work, before starting any);
// what runs finishes.
func (e *Engine) pause(ctx context.Context, r *run, by *events.Principal) error {
	e.acceptedFirst(ctx, r)
	r.rec.Status = dag.WorkflowPaused
	r.snap.Status = dag.WorkflowPaused
	e.touched(r)
	e.publishWorkflow(ctx, r, dag.WorkflowPaused, PausedReason, by)
	return e.saveRecord(ctx, r)
}

// resume steps the run again: what became ready while paused starts, and
// the formulas held on the executors go on.
func (e *Engine) resume(ctx context.Context, r *run, by *events.Principal) error {
	r.rec.Status = dag.WorkflowRunning
	r.snap.Status = dag.WorkflowRunning
	e.touched(r)
	e.publishWorkflow(ctx, r, dag.WorkflowRunning, "resumed: nodes start again", by)
	if err := e.saveRecord(ctx, r); err != nil {
		return err
	}
	return e.act(ctx, r, r.plan.Step(r.state))
}

// cancel ends the workflow: what has not started (or only waits for its
// health gate) is cancelled here. Formulas running on executors are killed
// there: the workflow is "cancelling" until their outcomes arrive, and
// cancelled only then, so CANCELLED never comes before the last of its
// work has stopped.
func (e *Engine) cancel(ctx context.Context, r *run, by *events.Principal) error {
	r.rec.CancelledBy = by
	return e.stop(ctx, r, "not started: the workflow was cancelled")
}

// stop stops a run that is cancelled, or whose deadline passed (Expired
// set): pending formulas are cancelled, with notStarted as their nodes'
// reason; a gate still being checked stops being waited for; a
// dispatched formula that no executor has taken (see untaken) is
// cancelled here; the others are killed by their executors, and the run
// waits for their outcomes (at most CancelWait), then ends.
func (e *Engine) stop(ctx context.Context, r *run, notStarted string) error {
	e.acceptedFirst(ctx, r)
	var d dag.Decision
	zones := map[string]events.Takers{}
	for _, i := range r.plan.Order {
		switch r.state.Formula(i) {
		case dag.FormulaPending:
			d.Cancelled = append(d.Cancelled, dag.Blocked{Formula: i, Blocker: -1})
		case dag.FormulaGating: // its nodes ran; only the wait for its gate ends
			if err := r.state.SetFormula(i, dag.FormulaCancelled, -1); err != nil {
				return fmt.Errorf("cancel %s: %w", r.plan.Formulas[i].ID, err)
			}
			e.publishFormula(ctx, r, i, dag.FormulaCancelled, "")
		case dag.FormulaReady:
			why, ok := e.untaken(ctx, r, i, zones)
			if !ok {
				break
			}
			if err := r.state.SetFormula(i, dag.FormulaCancelled, -1); err != nil {
				return fmt.Errorf("cancel %s: %w", r.plan.Formulas[i].ID, err)
			}
			e.recordFormula(ctx, r, i, dag.FormulaCancelled)
			e.stopFormulaWhy(ctx, r, i, dag.FormulaCancelled, "not started: no executor took its work ("+why+")", why)
		}
	}
	for _, b := range d.Cancelled {
		e.stopFormulaWhy(ctx, r, b.Formula, dag.FormulaCancelled, notStarted, rolloutStop(r, b.Formula))
	}
	r.state.Apply(d)
	now := e.now()
	r.rec.CancelledAt = &now
	e.touched(r)
	if n := inFlight(r); n > 0 {
		e.publishCancelling(ctx, r, n)
		e.awaitCancel(r)
		return e.saveRecord(ctx, r)
	}
	return e.stopped(ctx, r, "")
}

// DefaultCancelWait is how long a cancelled workflow waits, at most, for
// the outcomes of the formulas it had running.
const DefaultCancelWait = 30 * time.Second

func (e *Engine) cancelWait() time.Duration {
	if e.CancelWait > 0 {
		return e.CancelWait
	}
	return DefaultCancelWait
}

// awaitCancel notes when a cancelling run's wait for outcomes ends: the
// wait runs from the cancel (or from now, for a record that does not say
// when that was), and a run loaded again keeps the end it had.
func (e *Engine) awaitCancel(r *run) {
	if !r.stopping() {
		return
	}
	if _, ok := e.cancelling[r.rec.ID]; ok {
		return
	}
	since := e.now()
	if r.rec.CancelledAt != nil {
		since = *r.rec.CancelledAt
	}
	if e.cancelling == nil {
		e.cancelling = map[string]time.Time{}
	}
	e.cancelling[r.rec.ID] = since.Add(e.cancelWait())
}

// ExpireCancels ends, as cancelled, every cancelling workflow whose
// running formulas have not all reported within CancelWait of the cancel:
// their executor died and has not come back, or cannot reach its host.
// Those formulas are published cancelled (saying why), then the
// workflow. Their nodes are the executors' to end: an executor that
// picks up such a formula's work later finds the workflow cancelled,
// kills on the host what is recorded running there (or reads how it
// ended), and publishes each node's end. A workflow that cannot be ended
// now (its records moved on under another planner replica, or could not
// be written) is looked at again at the next call.
func (e *Engine) ExpireCancels(ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for _, id := range passed(e.cancelling, now) {
		err := e.unit(ctx, func() error {
			r, err := e.load(ctx, id)
			if err != nil {
				return err
			}
			if r == nil || !r.stopping() {
				delete(e.cancelling, id)
				return nil
			}
			return e.expireCancel(ctx, r)
		})
		if err != nil {
			e.Log.Warn("cannot end a cancelled workflow that waited too long; trying again", "workflow_id", id, "err", err)
			if _, ok := e.cancelling[id]; !ok {
				e.cancelling[id] = now // looked at again next time
			}
		}
	}
}

// expireCancel ends a cancelling run whose wait is over.
func (e *Engine) expireCancel(ctx context.Context, r *run) error {
	wait := e.cancelWait()
	of := "the cancel"
	if r.rec.CancelledBy == nil && r.rec.Expired != "" {
		of = "the deadline"
	}
	why := fmt.Sprintf("no outcome from its executor within %s of %s; an executor that picks up its work later kills what is still running on the host", wait, of)
	var stopped []string
	for _, i := range r.plan.Order {
		switch r.state.Formula(i) {
		case dag.FormulaReady, dag.FormulaRunning:
			if err := r.state.SetFormula(i, dag.FormulaCancelled, -1); err != nil {
				return fmt.Errorf("cancel %s: %w", r.plan.Formulas[i].ID, err)
			}
			e.recordFormula(ctx, r, i, dag.FormulaCancelled)
			ev := e.formulaEvent(r, i, dag.FormulaCancelled, "")
			ev.Error = why
			e.Out.Emit(r.formulaCtx(ctx, i), events.HostLifecycle(ev.Ref.Host), ev, e.msgID(r, r.plan.Formulas[i].ID, string(dag.FormulaCancelled)))
			stopped = append(stopped, r.plan.Formulas[i].ID)
		}
	}
	e.Log.Warn("stopped workflow ended without the outcomes of its running formulas", "workflow_id", r.rec.ID, "waited", wait, "formulas", stopped)
	e.touched(r)
	return e.stopped(ctx, r, fmt.Sprintf("%d running formula(s) gave no outcome within %s: %s", len(stopped), wait, strings.Join(stopped, ", ")))
}

// inFlight counts the formulas dispatched to executors and not ended.
func inFlight(r *run) int {
	n := 0
	for i := range r.plan.Formulas {
		switch r.state.Formula(i) {
		case dag.FormulaReady, dag.FormulaRunning:
			n++
		}
	}
	return n
}

// settleCancel ends a cancelling (or stopping) run once nothing of it
// runs any more.
func (e *Engine) settleCancel(ctx context.Context, r *run) error {
	e.touched(r)
	if inFlight(r) > 0 {
		return nil
	}
	return e.stopped(ctx, r, "")
}

// stopped records and announces the end of a stopped run: cancelled by
// request, or failed when its deadline passed. more is added to the
// reason (what gave no outcome).
func (e *Engine) stopped(ctx context.Context, r *run, more string) error {
	delete(e.cancelling, r.rec.ID)
	st, reason, by := dag.WorkflowCancelled, "cancelled by request", r.rec.CancelledBy
	if r.rec.CancelledBy == nil && r.rec.Expired != "" && more == "" {
		if d := r.plan.Step(r.state); d.Done && d.Result == dag.WorkflowSucceeded {
			// Every formula the deadline found running had ended on its
			// host before the stop reached it (its executor said so, as
			// for a formula's own timeout), and it found none to cancel:
			// the deadline stopped nothing, so the run ends as its work
			// did. (Its clock may have passed only for the planner: the
			// outcomes were held up, by a NATS outage say.)
			e.Log.Info("deadline passed, but every formula had ended before the stop reached it", "workflow_id", r.rec.ID)
			return e.finish(ctx, r, dag.WorkflowSucceeded)
		}
	}
	if r.rec.CancelledBy == nil && r.rec.Expired != "" {
		st, reason = dag.WorkflowFailed, r.rec.Expired
		if r.rec.Rollback != nil && r.rec.FailReason != "" {
			reason += " (while rolling back after " + r.rec.FailReason + ")"
		}
	}
	if more != "" {
		reason += "; " + more
	}
	e.publishWorkflow(ctx, r, st, reason, by)
	r.rec.Status = st
	r.snap.Status = st
	e.touched(r)
	e.Log.Info("workflow finished", "workflow_id", r.rec.ID, "status", st, "reason", reason)
	return e.saveRecord(ctx, r)
}

// retry starts a new generation that re-runs only what failed, was blocked
// or was cancelled; succeeded and skipped nodes stay as they are (the
// executor's records keep them from running again).
func (e *Engine) retry(ctx context.Context, r *run, by *events.Principal) error {
	rerun := r.retried(nil)
	if err := r.rerun(rerun); err != nil {
		return err
	}
	r.rec.Held, r.rec.Carried = nil, nil
	return e.nextGeneration(ctx, r, rerun, fmt.Sprintf("retry: generation %d", r.rec.Generation+1), by)
}

// retried are the formulas a retry runs again: what failed, was blocked
// or cancelled, or had not ended; but the failures carried.
func (r *run) retried(carried []string) []string {
	var ids []string
	for i := range r.plan.Formulas {
		switch r.state.Formula(i) {
		case dag.FormulaFailed, dag.FormulaBlocked, dag.FormulaCancelled, dag.FormulaUnhealthy,
			dag.FormulaReady, dag.FormulaRunning, dag.FormulaGating:
			if id := r.plan.Formulas[i].ID; !slices.Contains(carried, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// rerun sets the formulas of a retry back to pending.
func (r *run) rerun(ids []string) error {
	for _, id := range ids {
		i, ok := r.plan.Index(id)
		if !ok {
			return fmt.Errorf("retry %s: no such formula in the plan", id)
		}
		if err := r.state.SetFormula(i, dag.FormulaPending, -1); err != nil {
			return fmt.Errorf("retry %s: %w", id, err)
		}
	}
	return nil
}

// nextGeneration starts the retried run as a new generation, which
// re-runs the formulas rerun.
func (e *Engine) nextGeneration(ctx context.Context, r *run, rerun []string, reason string, by *events.Principal) error {
	if r.rec.Status.Terminal() {
		r.nextWorkflowSpan(e.now())
	}
	r.rec.Generation++
	r.rec.Began = &Began{Generation: r.rec.Generation, At: e.now(), Rerun: rerun}
	r.rec.Status = dag.WorkflowRunning
	r.rec.CancelledBy, r.rec.CancelledAt, r.rec.Expired = nil, nil, ""
	r.rec.setDeadline(e.now()) // a retry has the whole timeout again
	r.newGenerationSnapshot()
	delete(e.cancelling, r.rec.ID)
	e.publishWorkflow(ctx, r, dag.WorkflowRunning, reason, by)
	if err := e.saveRecord(ctx, r); err != nil {
		return err
	}
	e.activated(ctx, r.rec)
	return e.act(ctx, r, r.plan.Step(r.state))
}
