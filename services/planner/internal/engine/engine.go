// Package engine is the planner's use case: it accepts submissions, steps
// each run with pkg/dag on every event, and turns each decision into work
// (dispatch, gate) and lifecycle events.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

// Engine plans and steps workflows.
type Engine struct {
	Workflows jetstream.KeyValue // events.BucketWorkflows
	Runs      jetstream.KeyValue // events.BucketRuns
	State     jetstream.KeyValue // events.BucketState (read: per-host projection)
	Nodes     jetstream.KeyValue // events.BucketNodes (read: the executor's node records)
	Pub       *events.Publisher
	Log       *slog.Logger
	// Names names known public nkeys in audit records (see named).
	Names map[string]string
	// Heal, when set, re-creates a stream or bucket a request found
	// missing; the request is then tried once more.
	Heal func(ctx context.Context) error

	mu    sync.Mutex // one transition at a time
	cache map[string]*run
	// batch, while HandleBatch runs, collects what its events decided, to
	// be made durable once: dispatches waited for together, then one
	// snapshot per run touched.
	batch *pendingBatch
}

type pendingBatch struct {
	pubs  events.Batch
	n     int // publishes added since the last wait
	dirty []*run
	seen  map[*run]bool
}

// maxPendingPublishes bounds the asynchronous publishes in flight, well
// inside the client's limit.
const maxPendingPublishes = 256

type run struct {
	rec     *Record
	recRev  uint64
	plan    *dag.Plan
	state   *dag.RunState
	snap    Snapshot
	snapRev uint64
	done    map[string]bool
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
	if e.Heal == nil || !events.IsMissing(err) {
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
	if validateOnly {
		return &events.SubmitReply{Status: "valid", Plan: plan}, nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("workflow id: %w", err)
	}
	now := time.Now().UTC()
	rec := &Record{ID: id.String(), Name: c.Name, Operation: c.Operation, Status: dag.WorkflowAccepted, Generation: 1,
		CreatedAt: now, UpdatedAt: now, Composition: c, SubmittedBy: &by}
	if c.Operation == dag.OpCreate && !c.Reset {
		rec.AlreadyDone = e.alreadyDone(ctx, plan)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r := &run{rec: rec, plan: plan, state: plan.NewRunState(), done: toSet(rec.AlreadyDone)}
	r.snap = Snapshot{Generation: 1, Status: dag.WorkflowAccepted}
	r.captureSnapshot()
	if r.snapRev, err = putJSON(ctx, e.Runs, rec.ID, r.snap, 0); err != nil {
		return nil, fmt.Errorf("persist run %s: %w", rec.ID, err)
	}
	// The record goes last: a workflow exists once its record does.
	if r.recRev, err = putJSON(ctx, e.Workflows, rec.ID, rec, 0); err != nil {
		return nil, fmt.Errorf("persist workflow %s: %w", rec.ID, err)
	}
	e.cacheRun(r)
	e.Log.Info("workflow accepted", "workflow_id", rec.ID, "workflow", rec.Name, "formulas", len(plan.Formulas), "already_done", len(rec.AlreadyDone), "submitted_by", by.String())
	if err := e.publishWorkflow(ctx, r, dag.WorkflowAccepted, "", &by); err != nil {
		e.Log.Warn("accepted event not published; the run starts anyway", "workflow_id", rec.ID, "err", err)
	}
	return &events.SubmitReply{WorkflowID: rec.ID, Status: "accepted", Plan: plan}, nil
}

// Start begins an accepted run (dispatch what is ready), and steps a
// running one whose start or last step did not go through: calling it
// again until it succeeds is how a run survives a failed start.
func (e *Engine) Start(ctx context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, err := e.load(ctx, id)
	if err != nil || r == nil {
		return err
	}
	if err := e.advance(ctx, r); err != nil {
		delete(e.cache, id)
		return err
	}
	return nil
}

// advance begins an accepted run and steps a running one.
func (e *Engine) advance(ctx context.Context, r *run) error {
	switch r.rec.Status {
	case dag.WorkflowAccepted:
		return e.begin(ctx, r)
	case dag.WorkflowRunning:
		return e.act(ctx, r, r.plan.Step(r.state))
	}
	return nil
}

func (e *Engine) begin(ctx context.Context, r *run) error {
	if r.rec.Status != dag.WorkflowAccepted {
		return nil
	}
	if err := e.publishWorkflow(ctx, r, dag.WorkflowRunning, "", nil); err != nil {
		return err
	}
	r.rec.Status = dag.WorkflowRunning
	r.snap.StartedAt = time.Now().UTC()
	if err := e.saveRecord(ctx, r); err != nil {
		return err
	}
	return e.act(ctx, r, r.plan.Step(r.state))
}

// Resume restarts every unfinished workflow after a planner restart:
// accepted ones begin, running ones get whatever the full step finds due.
// It returns the workflows that could not be resumed now (Start them
// again).
func (e *Engine) Resume(ctx context.Context) (failed []string, err error) {
	lister, err := e.Workflows.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, k)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		r, err := e.load(ctx, id)
		if err != nil {
			e.Log.Error("cannot resume workflow", "workflow_id", id, "err", err)
			failed = append(failed, id)
			continue
		}
		if r == nil || r.rec.Status.Terminal() || r.rec.Status == dag.WorkflowPaused {
			continue
		}
		e.Log.Info("resuming workflow", "workflow_id", id, "status", r.rec.Status)
		if err := e.advance(ctx, r); err != nil {
			delete(e.cache, id)
			e.Log.Error("resume failed", "workflow_id", id, "err", err)
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

// HandleBatch applies events in order, then makes the batch durable: it
// waits for every dispatch published, then saves each touched run's
// snapshot once; only then are the events acknowledged. Decisions are
// published before they are recorded, and recorded before their events are
// acknowledged, as with one event at a time. If anything but a poison event
// fails, the runs in memory are forgotten and every other event of the
// batch is redelivered, to be applied to the saved state again (the
// publishes repeat under the same message ids and are dropped as
// duplicates).
func (e *Engine) HandleBatch(ctx context.Context, evs []*consume.Event) []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.batch = &pendingBatch{seen: map[*run]bool{}}
	defer func() {
		e.batch = nil
		if r := recover(); r != nil {
			e.cache = nil
			panic(r)
		}
	}()
	errs := make([]error, len(evs))
	var failed error
	for i, ev := range evs {
		if failed != nil {
			errs[i] = failed
			continue
		}
		err := e.handle(ctx, ev)
		if err != nil && !errors.Is(err, consume.ErrPoison) && !errors.Is(err, events.ErrMalformed) && !errors.Is(err, events.ErrUnknownType) {
			failed = fmt.Errorf("%w: event %d: %w", errBatchFailed, ev.Stream, err)
		}
		errs[i] = err
	}
	if failed == nil {
		if err := e.flush(ctx); err != nil {
			failed = fmt.Errorf("%w: %w", errBatchFailed, err)
		}
	}
	if failed != nil {
		// The runs in memory may be ahead of their saved snapshots.
		e.cache = nil
		for i, err := range errs {
			if err == nil {
				errs[i] = failed
			}
		}
	}
	return errs
}

// flush waits for the batch's publishes, then saves its runs' snapshots.
func (e *Engine) flush(ctx context.Context) error {
	b := e.batch
	if err := b.pubs.Wait(ctx); err != nil {
		return err
	}
	for _, r := range b.dirty {
		if err := e.saveSnapshot(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) handle(ctx context.Context, ev *consume.Event) error {
	switch ev.Type.Family() {
	case events.FamilyNode:
		// Runs are stepped on formula outcomes; node outcomes are the
		// executor's records (gantry_nodes), read where needed (rollback).
		return nil
	case events.FamilyFormula:
		var f events.FormulaEvent
		if err := events.DecodeData(ev.Envelope, &f); err != nil {
			return err
		}
		switch f.Status { // the executor's transitions; the rest are the planner's own
		case dag.FormulaRunning, dag.FormulaSucceeded, dag.FormulaFailed:
		default:
			return nil
		}
		r, i, ok, err := e.target(ctx, f.Ref)
		if !ok || err != nil {
			return err
		}
		return e.transition(ctx, r, i, f.Status)
	case events.FamilyHealth:
		var h events.HealthEvent
		if err := events.DecodeData(ev.Envelope, &h); err != nil {
			return err
		}
		if !h.Final {
			return nil
		}
		r, i, ok, err := e.target(ctx, h.Ref)
		if !ok || err != nil {
			return err
		}
		st := dag.FormulaUnhealthy
		if h.Status == events.HealthPass {
			st = dag.FormulaHealthy
		}
		return e.transition(ctx, r, i, st)
	}
	return nil
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
	if ref.Generation != r.rec.Generation || r.rec.Status == dag.WorkflowCancelled {
		return nil, 0, false, nil
	}
	i, ok := r.plan.Index(ref.Formula)
	if !ok {
		e.Log.Warn("event for an unknown formula ignored", "workflow_id", ref.WorkflowID, "formula", ref.Formula)
		return nil, 0, false, nil
	}
	return r, i, true, nil
}

// rank orders formula states along the lifecycle; a transition is applied
// only if it moves forward, so redelivered and late events change nothing.
func rank(s dag.FormulaState) int {
	switch s {
	case dag.FormulaPending:
		return 0
	case dag.FormulaReady:
		return 1
	case dag.FormulaRunning:
		return 2
	case dag.FormulaSucceeded:
		return 3
	case dag.FormulaGating:
		return 4
	}
	return 5 // healthy, unhealthy, failed, blocked, cancelled: final
}

func (e *Engine) transition(ctx context.Context, r *run, i int, st dag.FormulaState) error {
	cur := r.state.Formula(i)
	if rank(st) <= rank(cur) {
		return nil
	}
	if (st == dag.FormulaHealthy || st == dag.FormulaUnhealthy) && cur != dag.FormulaGating {
		return nil
	}
	if err := r.state.SetFormula(i, st, -1); err != nil {
		return consume.Poison(err)
	}
	if st == dag.FormulaHealthy || st == dag.FormulaUnhealthy {
		if err := e.publishFormula(ctx, r, i, st, ""); err != nil {
			return err
		}
	}
	d := r.plan.StepAfter(r.state, i)
	if st == dag.FormulaRunning && d.Empty() {
		return nil // nothing follows from "running"; the snapshot may keep "ready"
	}
	return e.act(ctx, r, d)
}

// act turns a decision into messages, then records it. Publishing first
// means a crash in between re-sends (deduplicated by Nats-Msg-Id) rather
// than forgets.
func (e *Engine) act(ctx context.Context, r *run, d dag.Decision) error {
	if r.rec.Status == dag.WorkflowPaused {
		d.Dispatch = nil // nothing new starts while paused; resume steps again
	}
	// Dispatches (and their "ready") are published without waiting for each
	// store, then all are waited for before anything is recorded: here, or
	// in a batch's flush.
	b := e.batch
	if b == nil {
		b = &pendingBatch{}
	}
	for _, i := range d.Dispatch {
		e.dispatch(r, i, &b.pubs)
		if b.n += 2; b.n >= maxPendingPublishes {
			b.n = 0
			if err := b.pubs.Wait(ctx); err != nil {
				return err
			}
		}
	}
	if e.batch == nil {
		if err := b.pubs.Wait(ctx); err != nil {
			return err
		}
	}
	for _, i := range d.Gate {
		if err := e.gate(ctx, r, i); err != nil {
			return err
		}
	}
	for _, b := range d.Blocked {
		if err := e.stopFormula(ctx, r, b, dag.FormulaBlocked, dag.NodeBlocked); err != nil {
			return err
		}
	}
	for _, b := range d.Cancelled {
		if err := e.stopFormula(ctx, r, b, dag.FormulaCancelled, dag.NodeCancelled); err != nil {
			return err
		}
	}
	r.state.Apply(d)
	if d.Done {
		if err := e.finish(ctx, r, d.Result); err != nil {
			return err
		}
	}
	if b := e.batch; b != nil {
		if !b.seen[r] {
			b.seen[r] = true
			b.dirty = append(b.dirty, r)
		}
		return nil
	}
	return e.saveSnapshot(ctx, r)
}

func (e *Engine) finish(ctx context.Context, r *run, result dag.WorkflowState) error {
	reason := ""
	if result == dag.WorkflowFailed {
		if k := firstFailed(r); k != "" {
			reason = "formula " + k + " failed"
		}
	}
	switch {
	case r.rec.Rollback == nil && result == dag.WorkflowFailed && r.rec.Composition.OnFailure == dag.OnFailureRollback:
		return e.startRollback(ctx, r, reason)
	case r.rec.Rollback != nil:
		// However the rollback went, the workflow failed; say what was undone.
		deleted, total := 0, 0
		for i := range r.plan.Formulas {
			pf := &r.plan.Formulas[i]
			for j := range pf.Nodes {
				total++
				if e.nodeRecord(ctx, r.rec.ID, dag.OpDelete, pf.ID, pf.Nodes[j].Name) == dag.NodeSucceeded {
					deleted++
				}
			}
		}
		reason = fmt.Sprintf("%s; rolled back: %d of %d succeeded nodes deleted", r.rec.FailReason, deleted, total)
		if result != dag.WorkflowSucceeded {
			reason += " (rollback incomplete: " + firstFailed(r) + " failed)"
		}
		result = dag.WorkflowFailed
	}
	if err := e.publishWorkflow(ctx, r, result, reason, nil); err != nil {
		return err
	}
	r.rec.Status = result
	r.snap.Status = result
	e.Log.Info("workflow finished", "workflow_id", r.rec.ID, "status", result, "reason", reason)
	return e.saveRecord(ctx, r)
}

func firstFailed(r *run) string {
	for _, i := range r.plan.Order {
		switch r.state.Formula(i) {
		case dag.FormulaFailed, dag.FormulaUnhealthy:
			return r.plan.Formulas[i].ID
		}
	}
	return ""
}

func (e *Engine) ref(r *run, i int) events.Ref {
	pf := &r.plan.Formulas[i]
	return events.Ref{WorkflowID: r.rec.ID, Workflow: r.rec.Name, Formula: pf.ID, Host: pf.Server, Operation: r.plan.Operation, Generation: r.rec.Generation}
}

// startRollback replaces the failed run with a delete run over the nodes
// that succeeded in it, in reverse dependency order, as a new generation.
func (e *Engine) startRollback(ctx context.Context, r *run, reason string) error {
	rb, skipped := e.rollbackComposition(ctx, r)
	r.rec.FailReason = reason
	if rb == nil {
		r.rec.Status = dag.WorkflowFailed
		r.snap.Status = dag.WorkflowFailed
		why := reason + "; nothing to roll back"
		if skipped > 0 {
			why = fmt.Sprintf("%s; nothing to roll back (%d succeeded nodes have no delete)", reason, skipped)
		}
		if err := e.publishWorkflow(ctx, r, dag.WorkflowFailed, why, nil); err != nil {
			return err
		}
		return e.saveRecord(ctx, r)
	}
	r.rec.Rollback = rb
	r.rec.Generation++
	r.plan = dag.PlanLoaded(rb)
	r.state = r.plan.NewRunState()
	r.done = map[string]bool{}
	msg := fmt.Sprintf("rolling back after %s: deleting %d formulas", reason, len(r.plan.Formulas))
	if skipped > 0 {
		msg += fmt.Sprintf(" (%d succeeded nodes have no delete and stay)", skipped)
	}
	e.Log.Info("rollback", "workflow_id", r.rec.ID, "formulas", len(r.plan.Formulas), "without_delete", skipped)
	if err := e.publishWorkflow(ctx, r, dag.WorkflowRunning, msg, nil); err != nil {
		return err
	}
	if err := e.saveRecord(ctx, r); err != nil {
		return err
	}
	return e.act(ctx, r, r.plan.Step(r.state))
}

// rollbackComposition is the composition that undoes what succeeded: the
// formulas and nodes that succeeded (not those skipped: they were there
// before), with their dependencies among themselves, as operation delete.
// Nodes without a delete command are counted and left in place.
func (e *Engine) rollbackComposition(ctx context.Context, r *run) (*dag.Composition, int) {
	src := r.rec.Composition
	keep := map[string]map[string]bool{}
	skipped := 0
	for i := range r.plan.Formulas {
		pf := &r.plan.Formulas[i]
		spec := r.plan.Spec(i)
		for j := range pf.Nodes {
			if e.nodeRecord(ctx, r.rec.ID, dag.OpCreate, pf.ID, pf.Nodes[j].Name) != dag.NodeSucceeded {
				continue
			}
			if spec.Nodes[j].Delete == "" {
				skipped++
				continue
			}
			if keep[pf.ID] == nil {
				keep[pf.ID] = map[string]bool{}
			}
			keep[pf.ID][pf.Nodes[j].Name] = true
		}
	}
	if len(keep) == 0 {
		return nil, skipped
	}
	c := &dag.Composition{Name: src.Name, Operation: dag.OpDelete, Hosts: src.Hosts, Retry: src.Retry, OnFailure: dag.OnFailureContinue}
	for _, f := range src.Formulas {
		nodes := keep[f.ID]
		if nodes == nil {
			continue
		}
		nf := dag.Formula{ID: f.ID, Server: f.Server, MaxParallel: f.MaxParallel}
		for _, d := range f.DependsOn {
			if keep[d.Formula] != nil {
				nf.DependsOn = append(nf.DependsOn, dag.FormulaDep{Formula: d.Formula, Condition: dag.ConditionCompleted})
			}
		}
		for _, n := range f.Nodes {
			if !nodes[n.Name] {
				continue
			}
			nn := n
			nn.DependsOn = []string{}
			for _, d := range n.DependsOn {
				if nodes[d] {
					nn.DependsOn = append(nn.DependsOn, d)
				}
			}
			nf.Nodes = append(nf.Nodes, nn)
		}
		c.Formulas = append(c.Formulas, nf)
	}
	if _, err := dag.NewPlan(c); err != nil { // validates and normalizes; cannot fail for a subset of a valid plan
		return nil, skipped
	}
	return c, skipped
}

func (e *Engine) msgID(r *run, parts ...string) string {
	return events.MsgID(append([]string{r.rec.ID, strconv.Itoa(r.rec.Generation)}, parts...)...)
}

func hostSpec(c *dag.Composition, server string) events.HostSpec {
	h := c.Hosts[server]
	return events.HostSpec{Transport: h.Transport, Address: h.Address, User: h.User}
}

func (e *Engine) dispatch(r *run, i int, b *events.Batch) {
	pf := &r.plan.Formulas[i]
	spec := r.plan.Spec(i)
	c := r.rec.Composition
	d := &events.Dispatch{Ref: e.ref(r, i), Host: hostSpec(c, pf.Server), MaxParallel: pf.MaxParallel, OnFailure: c.OnFailure, Order: pf.Order}
	d.Nodes = make([]events.WorkNode, len(pf.Nodes))
	for j := range pf.Nodes {
		pn, n := &pf.Nodes[j], &spec.Nodes[j]
		d.Nodes[j] = events.WorkNode{Name: pn.Name, Command: pn.Command, Check: pn.Check, DependsOn: pn.DependsOn,
			Timeout: n.Timeout, Env: n.Env, Retry: c.NodeRetry(n), SpecHash: pn.SpecHash, AlreadyDone: r.done[pf.ID+"/"+pn.Name]}
	}
	// "ready" goes first, on the same connection, so that in the stream it
	// precedes the dispatch and so the executor's "running".
	b.Add(e.Pub.PublishAsync(events.HostLifecycle(pf.Server), e.formulaEvent(r, i, dag.FormulaReady, ""), e.msgID(r, pf.ID, string(dag.FormulaReady))))
	b.Add(e.Pub.PublishAsync(events.HostDispatch(pf.Server), d, e.msgID(r, pf.ID, "dispatch")))
}

func (e *Engine) gate(ctx context.Context, r *run, i int) error {
	pf := &r.plan.Formulas[i]
	g := &events.GateRequest{Ref: e.ref(r, i), Host: hostSpec(r.rec.Composition, pf.Server), Gate: *pf.Gate}
	if err := e.publishFormula(ctx, r, i, dag.FormulaGating, ""); err != nil {
		return err
	}
	return e.Pub.Publish(ctx, events.HostGate(pf.Server), g, e.msgID(r, pf.ID, "gate"))
}

// stopFormula publishes a blocked or cancelled formula and each of its
// nodes, naming the failed formula behind it.
func (e *Engine) stopFormula(ctx context.Context, r *run, b dag.Blocked, fs dag.FormulaState, ns dag.NodeState) error {
	blocker := ""
	if b.Blocker >= 0 {
		blocker = r.plan.Formulas[b.Blocker].ID
	}
	pf := &r.plan.Formulas[b.Formula]
	for j := range pf.Nodes {
		ev := &events.NodeEvent{Ref: e.ref(r, b.Formula), Status: ns, Blocker: blocker, SpecHash: pf.Nodes[j].SpecHash}
		ev.Node = pf.Nodes[j].Name
		if ns == dag.NodeCancelled {
			ev.Reason = "not started: on_failure " + string(r.plan.OnFailure) + " after " + blocker + " failed"
		}
		if err := e.Pub.Publish(ctx, events.HostLifecycle(pf.Server), ev, e.msgID(r, pf.ID, ev.Node, string(ns))); err != nil {
			return err
		}
	}
	return e.publishFormula(ctx, r, b.Formula, fs, blocker)
}

func (e *Engine) formulaEvent(r *run, i int, st dag.FormulaState, blocker string) *events.FormulaEvent {
	now := time.Now().UTC()
	ev := &events.FormulaEvent{Ref: e.ref(r, i), Status: st, Blocker: blocker, Run: events.Run{Attempt: r.rec.Generation}}
	switch st {
	case dag.FormulaReady, dag.FormulaGating:
		ev.StartedAt = &now
	default:
		ev.EndedAt = &now
	}
	return ev
}

func (e *Engine) publishFormula(ctx context.Context, r *run, i int, st dag.FormulaState, blocker string) error {
	ev := e.formulaEvent(r, i, st, blocker)
	return e.Pub.Publish(ctx, events.HostLifecycle(ev.Ref.Host), ev, e.msgID(r, r.plan.Formulas[i].ID, string(st)))
}

// publishWorkflow publishes a workflow transition; by is who asked for it
// (nil for the planner's own).
func (e *Engine) publishWorkflow(ctx context.Context, r *run, st dag.WorkflowState, reason string, by *events.Principal) error {
	now := time.Now().UTC()
	ev := &events.WorkflowEvent{Ref: events.Ref{WorkflowID: r.rec.ID, Workflow: r.rec.Name, Operation: r.rec.Operation, Generation: r.rec.Generation},
		Status: st, Reason: reason, Run: events.Run{Attempt: r.rec.Generation, StartedAt: &now}, RequestedBy: by}
	if st.Terminal() {
		ev.EndedAt = &now
		ev.Error = reason
	}
	ev.Formulas = map[dag.FormulaState]int{}
	for i := range r.plan.Formulas {
		ev.Formulas[r.state.Formula(i)]++
		ev.TotalNodes += len(r.plan.Formulas[i].Nodes)
	}
	return e.Pub.Publish(ctx, events.WorkflowLifecycle(r.rec.ID), ev, e.msgID(r, "workflow", string(st), strconv.Itoa(r.rec.Requests)))
}

// nodeRecord is a node's outcome as the executor recorded it ("" if none).
func (e *Engine) nodeRecord(ctx context.Context, id string, op dag.Operation, formula, node string) dag.NodeState {
	if e.Nodes == nil {
		return ""
	}
	ent, err := e.Nodes.Get(ctx, events.NodeKey(id, op, formula, node))
	if err != nil {
		return ""
	}
	var rec events.NodeRecord
	_ = json.Unmarshal(ent.Value(), &rec)
	return rec.Status
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
