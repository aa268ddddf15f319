// Package engine is the planner's use case: it accepts submissions, steps
// each run with pkg/dag on every event, and turns each decision into work
// (dispatch, gate) and lifecycle events. It reaches storage and the bus
// only through the ports in ports.go.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/google/uuid"
)

// Engine plans and steps workflows.
type Engine struct {
	Workflows Records[Record]   // gantry_workflows: accepted workflows
	Runs      Records[Snapshot] // gantry_runs: run states (the executor reads them)
	// Nodes are the executors' node records (gantry_nodes): what a past
	// run of a composition did is what a submission skips as already
	// done. The state-store's projection (gantry_state) is not read:
	// whoever can write it changes what is reported, never what runs.
	Nodes Lister[events.NodeRecord]
	Out   Emitter
	// Events is the event stream, for a prune to remove a workflow's
	// events (nil: they stay, until the stream's age limit).
	Events EventStore
	Log    *slog.Logger
	// Names names known public nkeys in audit records (see named).
	Names map[string]string
	// Heal, when set, re-creates a stream or bucket a request found
	// missing; the request is then tried once more.
	Heal func(ctx context.Context) error
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Tracer records the workflow and formula spans (nil: none).
	Tracer *tracing.Tracer
	// WorkflowRevs and RunRevs follow the revisions of Workflows and Runs,
	// so a run kept in memory is known to be current without reading it
	// again; when nil, the records are read again instead.
	WorkflowRevs, RunRevs Revisions
	// CancelWait bounds how long a cancelled workflow waits for the
	// outcomes of its running formulas (DefaultCancelWait when 0).
	CancelWait time.Duration
	// Zones tells whether any executor takes a zone's dispatches; nil:
	// the planner never looks (no work is reported unclaimed, and a
	// cancel or deadline waits for every dispatched formula's outcome).
	Zones Zones
	// UnclaimedAfter is how long a dispatch may stay with no executor
	// taking it before the planner says so (DefaultUnclaimedAfter when 0).
	UnclaimedAfter time.Duration

	mu      sync.Mutex // one unit of work at a time
	cache   map[string]*run
	dirty   []*run // runs changed by the unit of work under way
	checked []*run // cached runs found current in the unit of work under way
	// recheck is since when the events emitted now are looked for in
	// the stream before they are sent (Emitter.Recheck; zero: off), as
	// recheckFrom set it.
	recheck time.Time
	// ended are the workflow ends the unit of work under way published:
	// counted once it is stored.
	ended []dag.WorkflowState
	// stopped are the nodes the unit of work blocked or cancelled before
	// dispatch, counted with ended.
	stoppedNodes []stoppedNode
	// active are the workflows not ended this engine has stepped.
	active  map[string]bool
	activeN atomic.Int64 // len(active), read without mu
	// cancelling are the cancelling workflows this engine has loaded,
	// with when their wait for outcomes ends.
	cancelling map[string]time.Time
	// timers are the runs with a deadline to keep, with when the next
	// one is due (ExpireDeadlines).
	timers map[string]time.Time
	// waiting are the dispatches no executor has said it runs yet (their
	// formula ready), with since when (CheckUnclaimed).
	waiting map[waitKey]*waitingDispatch
}

type run struct {
	rec     *Record
	recRev  uint64
	plan    *dag.Plan
	state   *dag.RunState
	snap    Snapshot
	snapRev uint64
	done    map[string]bool
	dirty   bool
	started map[int]time.Time // formula dispatch times, for their spans (only when tracing)
	checked bool              // found current (or loaded) in this unit of work
	// acceptedStored: the submission saw its accepted event stored
	// (acceptedFirst need not look for it).
	acceptedStored bool
	// announce are the workflow events decided in this unit of work, to
	// be published once the record that says them is written (saveRecord).
	announce []Announcement
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now().UTC()
	}
	return time.Now().UTC()
}

// Submit validates, plans and (unless validateOnly) accepts a composition
// submitted by by. A rejected composition writes nothing. The reply says
// which.
func (e *Engine) Submit(ctx context.Context, data []byte, validateOnly bool, by events.Principal) (*events.SubmitReply, error) {
	reply, err := e.submit(ctx, data, validateOnly, e.named(by))
	if e.healed(ctx, err) {
		return e.submit(ctx, data, validateOnly, e.named(by))
	}
	return reply, err
}

// healed says whether err was a missing stream or bucket that Heal has
// now re-created.
func (e *Engine) healed(ctx context.Context, err error) bool {
	if e.Heal == nil || !eventbus.IsMissing(err) {
		return false
	}
	if herr := e.Heal(ctx); herr != nil {
		e.Log.Error("cannot re-create what the request needs", "err", herr)
		return false
	}
	return true
}

func (e *Engine) submit(ctx context.Context, data []byte, validateOnly bool, by events.Principal) (*events.SubmitReply, error) {
	c, err := composition.Load("", data)
	if err != nil {
		var inv *dag.InvalidError
		if errors.As(err, &inv) {
			return &events.SubmitReply{Status: "rejected", Errors: inv.Messages(), Problems: inv.Problems}, nil
		}
		return nil, err
	}
	plan := dag.PlanLoaded(c)
	if err := replyFits(plan); err != nil {
		return &events.SubmitReply{Status: "rejected", Errors: []string{
			"composition " + c.Name + ": its plan is too large for a reply: " + err.Error() + "; split it into several compositions (for example one per group or zone)"}}, nil
	}
	if validateOnly {
		// as submitted, less what it would skip as already done
		if reply := e.unrecordable(&Record{ID: strings.Repeat("0", 36), Name: c.Name, Operation: c.Operation, Composition: c}); reply != nil {
			return reply, nil
		}
		return &events.SubmitReply{Status: "valid", Plan: plan}, nil
	}
	rec, err := e.newRecord(ctx, c, plan, by)
	if err != nil {
		return nil, err
	}
	if reply := e.unrecordable(rec); reply != nil {
		return reply, nil
	}
	if err := e.lockFor(ctx); err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	r := &run{rec: rec, plan: plan, state: plan.NewRunState(), done: toSet(rec.AlreadyDone)}
	r.snap = Snapshot{Generation: 1, Status: dag.WorkflowAccepted}
	r.captureSnapshot()
	// Listed among its composition's runs before it exists, so no later
	// submission of the composition decides what is done without it.
	if err := e.remember(ctx, rec); err != nil {
		return nil, err
	}
	if r.snapRev, err = e.Runs.Put(ctx, rec.ID, r.snap, 0); err != nil {
		return nil, fmt.Errorf("persist run %s: %w", rec.ID, err)
	}
	// The record goes last: a workflow exists once its record does.
	if r.recRev, err = e.putRecord(ctx, rec); err != nil {
		return nil, err
	}
	e.cacheRun(r)
	e.Log.Info("workflow accepted", "workflow_id", rec.ID, "workflow", rec.Name, "formulas", len(plan.Formulas), "already_done", len(rec.AlreadyDone), "submitted_by", by.String())
	reply := &events.SubmitReply{WorkflowID: rec.ID, Status: "accepted", Plan: plan}
	if rec.Trace != nil {
		reply.TraceID = rec.Trace.TraceID
	}
	e.publishAccepted(ctx, r, &by)
	fctx, cancel := context.WithTimeout(ctx, AcceptedEventWait)
	defer cancel()
	if err := e.Out.Flush(fctx); err != nil {
		e.Log.Warn("accepted event not published; the run starts anyway", "workflow_id", rec.ID, "err", err)
		reply.Warnings = append(reply.Warnings, "accepted, but its accepted event is not stored yet ("+err.Error()+"): the run starts once JetStream stores again")
	} else {
		r.acceptedStored = true
	}
	return reply, nil
}

// replyFits says whether the reply that carries plan fits in one
// message (eventbus.ErrTooLarge if not), checked before anything is
// stored, with ids as long as its workflow's and trace's: a workflow
// accepted whose reply cannot be sent would be one its submitter is told
// failed, and submits again. (A warning added later that tips it over
// still starts the run: the submit handler says it is accepted.)
func replyFits(plan *dag.Plan) error {
	_, _, err := eventbus.EncodeBody(&events.SubmitReply{Status: "accepted", Plan: plan,
		WorkflowID: strings.Repeat("0", 36), TraceID: strings.Repeat("0", 32)})
	return err
}

// AcceptedEventWait bounds how long a submission waits for its accepted
// event to be stored: the workflow is accepted once its record is, and
// the reply must reach the submitter before it gives up.
const AcceptedEventWait = 5 * time.Second

// putRecord writes an accepted workflow's record. A write that failed
// without an answer may have been stored all the same: the record is read
// back, so the reply says accepted exactly when the record is there.
func (e *Engine) putRecord(ctx context.Context, rec *Record) (uint64, error) {
	rev, err := e.Workflows.Put(ctx, rec.ID, *rec, 0)
	if err == nil {
		return rev, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, rev, gerr := e.Workflows.Get(rctx, rec.ID); gerr == nil {
		e.Log.Warn("the workflow's record write had no answer but the record is stored: accepted", "workflow_id", rec.ID, "err", err)
		return rev, nil
	}
	return 0, fmt.Errorf("persist workflow %s: %w", rec.ID, err)
}

// newRecord is the record of a workflow about to be accepted.
func (e *Engine) newRecord(ctx context.Context, c *dag.Composition, plan *dag.Plan, by events.Principal) (*Record, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("workflow id: %w", err)
	}
	now := e.now()
	rec := &Record{ID: id.String(), Name: c.Name, Operation: c.Operation, Status: dag.WorkflowAccepted, Generation: 1,
		CreatedAt: now, UpdatedAt: now, Composition: c, SubmittedBy: &by, Trace: e.newTrace(ctx, now)}
	rec.setDeadline(now)
	if c.Operation == dag.OpCreate && !c.Reset {
		// The revision first: every record read next is at or below it,
		// or was written meanwhile (and may be read or not; the executor
		// decides again at the node's turn either way).
		seen, err := e.Nodes.Revision(ctx)
		if err != nil {
			return nil, fmt.Errorf("read what the executors recorded: %w", err)
		}
		rec.SkipAtTurnAfter = &seen
		if rec.AlreadyDone, err = e.alreadyDone(ctx, rec.ID, plan); err != nil {
			return nil, err
		}
		rec.AlreadyDone = slices.DeleteFunc(rec.AlreadyDone, func(k string) bool { return slices.Contains(c.Rerun, k) })
	}
	return rec, nil
}

// Start begins an accepted run (dispatch what is ready), and steps a
// running one whose start or last step did not go through: calling it
// again until it succeeds is how a run survives a failed start.
func (e *Engine) Start(ctx context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.unit(ctx, func() error {
		r, err := e.load(ctx, id)
		if err != nil || r == nil {
			return err
		}
		return e.advance(ctx, r)
	})
}

// advance begins an accepted run and steps a running one.
func (e *Engine) advance(ctx context.Context, r *run) error {
	if r.stopping() {
		return e.settleCancel(ctx, r)
	}
	switch r.rec.Status {
	case dag.WorkflowAccepted:
		return e.begin(ctx, r)
	case dag.WorkflowRunning:
		return e.act(ctx, r, r.plan.Step(r.state))
	}
	return nil
}

func (e *Engine) begin(ctx context.Context, r *run) error {
	e.acceptedFirst(ctx, r)
	e.publishWorkflow(ctx, r, dag.WorkflowRunning, "", nil)
	r.rec.Status = dag.WorkflowRunning
	r.snap.Status = dag.WorkflowRunning
	r.snap.StartedAt = e.now()
	if err := e.saveRecord(ctx, r); err != nil {
		return err
	}
	return e.act(ctx, r, r.plan.Step(r.state))
}

// acceptedFirst publishes an accepted run's accepted event again before
// the run's first transition (it begins, is paused or is stopped), unless
// its submission saw it stored: a submission stops waiting for it after
// AcceptedEventWait (JetStream slow to store, as in a partition), and a
// planner may stop between recording a workflow and storing its event.
// The stream is read for it first (Emitter.Recheck), so it is stored once
// however long ago its first copy went out, and before what follows it.
// Only a unit that looks for nothing else calls it: an accepted run has
// no events of its own to handle.
func (e *Engine) acceptedFirst(ctx context.Context, r *run) {
	if r.rec.Status != dag.WorkflowAccepted || r.acceptedStored {
		return
	}
	restore := e.recheckFrom(r.rec.CreatedAt)
	e.publishAccepted(ctx, r, r.rec.SubmittedBy)
	restore()
}

// recheckFrom has the events emitted from now on looked for in the
// stream before they are sent, from since on (or from the earlier time a
// caller already asked for), and returns what puts the setting back as it
// was: a unit within a unit (a record's announcements read back within a
// redelivered batch) does not turn off the outer one's.
func (e *Engine) recheckFrom(since time.Time) (restore func()) {
	if since.IsZero() { // not known (a record of an older planner): the recheck in force stays
		return func() {}
	}
	prev := e.recheck
	if prev.IsZero() || since.Before(prev) {
		e.recheck = since
		e.Out.Recheck(since)
	}
	return func() {
		e.recheck = prev
		e.Out.Recheck(prev)
	}
}

// Resume restarts every unfinished workflow after a planner restart:
// accepted ones begin, running ones get whatever the full step finds due.
// It returns the workflows that could not be resumed now (Start them
// again).
func (e *Engine) Resume(ctx context.Context) (failed []string, err error) {
	ids, err := e.Workflows.Keys(ctx, workflowKeys)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	listed, err := e.listed(ctx)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		err := e.unit(ctx, func() error {
			r, err := e.load(ctx, id)
			if err != nil || r == nil {
				return err
			}
			if !listed[id] { // accepted before runs were listed by composition
				if err := e.remember(ctx, r.rec); err != nil {
					e.Log.Warn("cannot list the workflow among its composition's runs", "workflow_id", id, "err", err)
				}
			}
			if r.rec.Status.Terminal() || r.rec.Status == dag.WorkflowPaused {
				return nil
			}
			e.Log.Info("resuming workflow", "workflow_id", id, "status", r.rec.Status)
			return e.advance(ctx, r)
		})
		if err != nil {
			e.Log.Error("cannot resume workflow", "workflow_id", id, "err", err)
			failed = append(failed, id)
		}
	}
	return failed, nil
}

// Handle is the consumer handler for node, formula and health events, one
// at a time.
func (e *Engine) Handle(ctx context.Context, ev *consume.Event) error {
	return e.HandleBatch(ctx, []*consume.Event{ev})[0]
}

// errBatchFailed is the result of the events of a batch that another
// event's failure (or the final write's) sends back for redelivery.
var errBatchFailed = errors.New("batch not recorded")

// HandleBatch applies events in order as one unit of work: what they
// decided is published, then each touched run's snapshot is saved once;
// only then are the events acknowledged. If anything but a poison event
// fails, the runs in memory are forgotten and every other event of the
// batch is redelivered, to be applied to the saved state again (the
// publishes repeat under the same message ids and are dropped as
// duplicates).
func (e *Engine) HandleBatch(ctx context.Context, evs []*consume.Event) []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if since, again := redelivered(evs); again {
		// What an earlier unit decided on these events may be stored, maybe
		// longer ago than the event stream's duplicate window.
		defer e.recheckFrom(since)()
	}
	errs := make([]error, len(evs))
	failed := e.unit(ctx, func() error {
		for i, ev := range evs {
			if errs[i] = e.handle(ctx, ev); errs[i] != nil && !unusable(errs[i]) {
				return fmt.Errorf("%w: event %d: %w", errBatchFailed, ev.Stream, errs[i])
			}
		}
		return nil
	})
	if failed != nil {
		if !errors.Is(failed, errBatchFailed) {
			failed = fmt.Errorf("%w: %w", errBatchFailed, failed)
		}
		for i, err := range errs {
			if err == nil {
				errs[i] = failed
			}
		}
	}
	return errs
}

// redelivered says whether any of evs was delivered before, and the
// earliest time one of those was published.
func redelivered(evs []*consume.Event) (since time.Time, again bool) {
	for _, ev := range evs {
		if ev.Delivered > 1 && (!again || ev.Time.Before(since)) {
			since, again = ev.Time, true
		}
	}
	return since, again
}

// unusable says an event can never be applied (to be terminated, not
// redelivered).
func unusable(err error) bool {
	return errors.Is(err, consume.ErrPoison) || errors.Is(err, events.ErrMalformed) || errors.Is(err, events.ErrUnknownType)
}

// lockFor takes the engine for a request, or gives up when ctx ends
// first: a unit of work may hold it for most of a minute (its events not
// stored, the publisher trying each again), and a request's answer must
// reach its requester before it gives up (eventbus.HandlerContext).
func (e *Engine) lockFor(ctx context.Context) error {
	began := time.Now()
	for !e.mu.TryLock() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited %s for the planner's work in progress: %w", time.Since(began).Round(time.Millisecond), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// unit runs fn as one unit of work: what it decided is published, then the
// runs it changed are saved. If anything fails, the runs in memory (which
// may be ahead of what was saved) are forgotten and reloaded when next
// needed.
func (e *Engine) unit(ctx context.Context, fn func() error) (err error) {
	defer func() {
		for _, r := range e.checked {
			r.checked = false
		}
		e.checked = nil
	}()
	defer func() {
		if p := recover(); p != nil {
			e.forget(ctx)
			panic(p)
		}
		if err != nil {
			e.forget(ctx)
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	return e.commit(ctx)
}

// commit waits for the unit's events, then saves its runs' snapshots.
func (e *Engine) commit(ctx context.Context) error {
	if err := e.Out.Flush(ctx); err != nil {
		return err
	}
	for len(e.dirty) > 0 {
		r := e.dirty[0]
		if err := e.saveSnapshot(ctx, r); err != nil {
			return err
		}
		r.dirty = false
		e.dirty = e.dirty[1:]
		e.settled(r)
		e.arm(r)
	}
	e.countEnded()
	return nil
}

func (e *Engine) forget(ctx context.Context) {
	e.cache, e.dirty, e.ended, e.stoppedNodes = nil, nil, nil, nil
	if err := e.Out.Flush(ctx); err != nil {
		e.Log.Debug("events of a failed unit of work not stored", "err", err)
	}
}

// touched marks a run to be saved when the unit of work commits.
func (e *Engine) touched(r *run) {
	if !r.dirty {
		r.dirty = true
		e.dirty = append(e.dirty, r)
	}
}

func toSet(keys []string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// named gives an attested requester whose credentials carry no name (an
// nkey) the name gantry knows its key by.
func (e *Engine) named(by events.Principal) events.Principal {
	if by.Attested && by.Name == "" {
		by.Name = e.Names[by.User]
	}
	return by
}
