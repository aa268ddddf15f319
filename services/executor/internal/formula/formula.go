// Package formula runs one dispatched formula: its nodes in order (or up to
// max_parallel at once), each with its check, retries and timeout, on the
// formula's host; it publishes every node transition and output line, and
// records attempts so a redelivered formula never runs a succeeded node again.
// It reaches storage, the bus and hosts only through the ports in ports.go.
package formula

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	"github.com/gantry-dev/gantry/pkg/hostfile"
	"github.com/gantry-dev/gantry/pkg/outputs"
	"github.com/gantry-dev/gantry/pkg/secrets"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
	"go.opentelemetry.io/otel/trace"
)

// Executor runs dispatched formulas.
type Executor struct {
	Hosts   Runners
	Records Records // gantry_nodes
	// Runs is the planner's gantry_runs (run snapshots: small, with the
	// run's status and generation), read to skip work of a workflow that
	// was cancelled, or retried, before its dispatch arrived.
	Runs Runs
	Bus  Bus
	// Secrets holds the values of the secrets nodes name (none when nil).
	Secrets Secrets
	// Sources holds the files nodes place as source (--files-dir; none
	// when nil).
	Sources Sources
	// Outputs holds what nodes hand on (gantry_outputs): written once a
	// node that declares outputs succeeds, read by the nodes that read
	// them. Nil: no node may declare or read one.
	Outputs outputs.Store
	Actor   string
	PerHost int // nodes running at once per host (default 8)
	// Slots holds the dispatches' limits across executors; without it,
	// PerHost holds per host in this executor only.
	Slots *slots.Manager
	Log   *slog.Logger
	// Tracer records node and attempt spans (nil: none).
	Tracer *tracing.Tracer
	// Stopping is done when the executor is stopping (SIGINT, SIGTERM;
	// nil: never). Attempts that started a command run on to their end,
	// but nothing more starts: an attempt waiting for its slots, or
	// between two attempts, stops waiting, and one whose runner was
	// drained (hostexec.ErrDraining) started nothing; the dispatch is
	// given back (ErrStopping) for a redelivery to go on from the records.
	Stopping context.Context

	mu      sync.Mutex
	sems    map[string]chan struct{}
	running map[string]map[*tracked]struct{} // workflow id -> its formulas in flight
	nodes   map[*inFlight]struct{}           // nodes in flight
	// cancelled are the workflows seen cancelled (or cancelling) on the
	// bus, with the generation cancelled and when it was seen: a dispatch
	// that arrives just after the cancel event, before the run snapshot
	// says so, must not run either.
	cancelled map[string]cancelSeen
	// expired are the formulas seen on the bus to be stopped because
	// their timeout passed (WorkflowEvent.Stopping), by workflow id and
	// formula, for the same reason.
	expired map[string]cancelSeen
	// resumes wake the formulas a pause holds, by workflow id (Resumed);
	// held are those formulas, for the status.
	resumes map[string]map[chan struct{}]struct{}
	held    map[*formulaRun]events.HeldFormula
}

type cancelSeen struct {
	generation int
	at         time.Time
}

// tracked is a formula run in flight, killed with a cause.
type tracked struct {
	formula    string
	generation int
	kill       context.CancelCauseFunc
}

// errDeadline is why a formula is stopped when its timeout has passed.
var errDeadline = errors.New("the formula's timeout passed")

// cancelRequest is why a formula is stopped when its workflow was
// cancelled, by whom (the requester's name as the cancel event gives it);
// deadline: by no one, the composition's timeout passed (the planner
// stops the run as a cancel does).
type cancelRequest struct {
	by       string
	deadline bool
}

func (c *cancelRequest) Error() string {
	switch {
	case c.deadline:
		return "cancelled: the composition's timeout passed"
	case c.by == "":
		return "cancelled by request"
	}
	return "cancelled by " + c.by
}

// cancelMemory is how long a cancel seen on the bus is remembered: the
// run snapshot says so long before.
const cancelMemory = 10 * time.Minute

// Record is what the executor keeps per node of a workflow in the
// gantry_nodes bucket. It is written before each attempt and after the
// outcome, so after a crash the next delivery knows how many attempts were
// made and that a succeeded node must not run again.
type Record = events.NodeRecord

// CancelWorkflow kills every node of the workflow running here.
func (x *Executor) CancelWorkflow(id string) { x.cancelWorkflow(id, &cancelRequest{}) }

// cancelWorkflow kills every node of the workflow running here, for why.
func (x *Executor) cancelWorkflow(id string, why *cancelRequest) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for c := range x.running[id] {
		c.kill(why)
	}
}

// StopFormulas kills the nodes of the workflow's formulas (of generation
// gen) running here, whose timeout has passed: each such formula is
// reported failed, with the reason deadline. The stop is remembered for
// their dispatches that arrive next, as a cancel is.
func (x *Executor) StopFormulas(id string, gen int, formulas []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := time.Now()
	if x.expired == nil {
		x.expired = map[string]cancelSeen{}
	}
	for k, c := range x.expired {
		if now.Sub(c.at) > cancelMemory {
			delete(x.expired, k)
		}
	}
	for _, f := range formulas {
		x.expired[id+"|"+f] = cancelSeen{generation: gen, at: now}
	}
	for c := range x.running[id] {
		if c.generation == gen && slices.Contains(formulas, c.formula) {
			c.kill(errDeadline)
		}
	}
}

// seenExpired says whether the dispatch's formula was seen on the bus to
// be stopped for its deadline, in the dispatch's generation.
func (x *Executor) seenExpired(d *events.Dispatch) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	c, ok := x.expired[d.WorkflowID+"|"+d.Formula]
	return ok && c.generation == d.Generation
}

// Cancelled kills every node of generation gen (or an earlier one) of the
// workflow running here, cancelled by by (the requester's name, "" when
// not known), and remembers the cancel for the dispatches of that
// generation that arrive next.
func (x *Executor) Cancelled(id string, gen int, by string) {
	x.stopWorkflow(id, gen, &cancelRequest{by: by})
}

// DeadlinePassed is Cancelled for a run the planner stops because the
// composition's timeout passed: its nodes say so, not that someone asked.
func (x *Executor) DeadlinePassed(id string, gen int) {
	x.stopWorkflow(id, gen, &cancelRequest{deadline: true})
}

func (x *Executor) stopWorkflow(id string, gen int, why *cancelRequest) {
	x.mu.Lock()
	now := time.Now()
	if x.cancelled == nil {
		x.cancelled = map[string]cancelSeen{}
	}
	for k, c := range x.cancelled {
		if now.Sub(c.at) > cancelMemory {
			delete(x.cancelled, k)
		}
	}
	if c := x.cancelled[id]; gen >= c.generation {
		x.cancelled[id] = cancelSeen{generation: gen, at: now}
	}
	x.mu.Unlock()
	x.cancelWorkflow(id, why)
}

// seenCancelled says whether a cancel of the dispatch's generation (or a
// later one) was seen on the bus.
func (x *Executor) seenCancelled(d *events.Dispatch) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	c, ok := x.cancelled[d.WorkflowID]
	return ok && c.generation >= d.Generation
}

func (x *Executor) track(id string, c *tracked) func() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.running == nil {
		x.running = map[string]map[*tracked]struct{}{}
	}
	if x.running[id] == nil {
		x.running[id] = map[*tracked]struct{}{}
	}
	x.running[id][c] = struct{}{}
	return func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		delete(x.running[id], c)
		if len(x.running[id]) == 0 {
			delete(x.running, id)
		}
	}
}

// errPruned: the dispatch's workflow has no run snapshot: it was pruned.
var errPruned = errors.New("the workflow is no more (pruned)")

// runStateCheck is how often a running formula reads its run state again.
// A cancel comes to the executor on the bus (a core subscription), which
// it misses while its connection is down (a NATS server restarting, a
// network blip): the run state then stops the formula within this, well
// inside the planner's cancel wait, and the node running is killed and
// the next never starts.
var runStateCheck = 5 * time.Second

// watchRunState reads the run state of d's workflow every runStateCheck
// until ctx (the formula's) ends, and kills the formula once the workflow
// is cancelled (or cancelling) in d's generation, a later generation
// superseded it, or the formula's timeout passed (a stop missed on the
// bus too). A read that fails is tried again at the next tick.
func (x *Executor) watchRunState(ctx context.Context, d *events.Dispatch, kill context.CancelCauseFunc, log *slog.Logger) {
	t := time.NewTicker(runStateCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cancelled, later, expired, err := x.superseded(ctx, d)
		if err != nil {
			if ctx.Err() == nil {
				log.Debug("cannot read the run state; reading it again later", "err", err)
			}
			continue
		}
		if cancelled || later {
			log.Info("workflow cancelled or superseded (read in its run state): killing its nodes here", "cancelled", cancelled, "superseded", later)
			kill(nil)
			return
		}
		if expired {
			log.Info("formula past its timeout (read in its run state): killing its nodes here")
			kill(errDeadline)
			return
		}
	}
}

// superseded reports whether the planner has cancelled the workflow (or
// is cancelling it), or moved on to a later generation, so this dispatch
// must not run. A run state of an earlier generation than the dispatch's
// is one the planner has not saved again yet since the retry that sent
// the dispatch (it publishes before it saves): its cancel was the earlier
// generation's. A run state that cannot be read is an error (the
// dispatch comes back later).
func (x *Executor) superseded(ctx context.Context, d *events.Dispatch) (cancelled, later, expired bool, err error) {
	w, err := x.runState(ctx, d.WorkflowID)
	if err != nil {
		return false, false, false, err
	}
	cancelled, later, expired = supersedes(w, d)
	return cancelled, later, expired, nil
}

// runState reads a workflow's run state: errPruned when it is gone.
func (x *Executor) runState(ctx context.Context, id string) (events.RunSnapshot, error) {
	w, _, err := x.Runs.Get(ctx, id)
	if errors.Is(err, events.ErrNoRecord) {
		return w, x.gone(ctx, id)
	}
	if err != nil {
		return w, fmt.Errorf("read the run state of %s: %w", id, err)
	}
	return w, nil
}

// supersedes is what run state w says of dispatch d (superseded).
func supersedes(w events.RunSnapshot, d *events.Dispatch) (cancelled, later, expired bool) {
	switch {
	case w.Generation > d.Generation:
		return false, true, false
	case w.Generation < d.Generation:
		return false, false, false
	}
	return w.Status == dag.WorkflowCancelled || w.Cancelling, false, slices.Contains(w.Expired, d.Formula)
}

// gone is errPruned when the authoritative copy confirms that the run
// state of a workflow is gone, and otherwise an error that brings the
// dispatch back later: a replica behind the others (one cut off in a
// partition) does not hold a run started since.
func (x *Executor) gone(ctx context.Context, id string) error {
	absent, err := x.Runs.Absent(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("the run state of %s was not found; confirming it: %w", id, err)
	case !absent:
		return fmt.Errorf("the run state of %s: %w", id, errRunStateBehind)
	}
	return errPruned
}

// errRunStateBehind: the run state read is not found where the stream's
// leader holds it.
var errRunStateBehind = errors.New("not found on the replica read, but held by the leader (a replica behind)")

// Handle is the consumer handler for decky.*.dispatch.
func (x *Executor) Handle(ctx context.Context, ev *consume.Event) error {
	var d events.Dispatch
	if err := events.DecodeData(ev.Envelope, &d); err != nil {
		return err
	}
	return x.run(eventbus.ExtractTrace(ctx, ev.Header), &d, ev.Time, ev.Delivered > 1)
}

// Run runs a formula to its end and publishes its outcome. An error means
// the outcome could not be recorded; the dispatch should be redelivered.
// The span context in ctx (the dispatch's, the formula's span) is the
// parent of the node spans.
func (x *Executor) Run(ctx context.Context, d *events.Dispatch) error {
	return x.run(ctx, d, time.Time{}, false)
}

// run is Run of a dispatch published at sent (zero: unknown), delivered
// before if again. What an earlier delivery (here or on another executor)
// published may be stored since sent, maybe longer ago than the event
// stream's duplicate window: a delivery that comes again, or finds a node
// recorded in its generation (nodeRun.read), looks for each event before
// sending it.
func (x *Executor) run(ctx context.Context, d *events.Dispatch, sent time.Time, again bool) error {
	pf, err := plannedFormula(d)
	if err != nil {
		return consume.Poison(err)
	}
	f := &formulaRun{x: x, d: d, pf: pf, out: x.Bus.Batch(), sent: sent, again: again, started: time.Now().UTC(), span: trace.SpanContextFromContext(ctx),
		log: x.Log.With("workflow_id", d.WorkflowID, "host", d.Ref.Host, "formula", d.Formula)}
	if again {
		f.recheck(sent)
	}
	stop, kill := context.WithCancelCause(ctx)
	defer kill(nil)
	// Tracked before the run state is read: a cancel (or a stop for the
	// formula's deadline) published from now on kills what this delivery
	// starts; one published before shows in the run state, or was seen
	// on the bus.
	defer x.track(d.WorkflowID, &tracked{formula: d.Formula, generation: d.Generation, kill: kill})()
	resumed, resumeDone := x.awaitResume(d.WorkflowID) // before the read, for the first look for a pause
	w, err := x.runState(ctx, d.WorkflowID)
	f.atDispatch = &readState{w: w, resumed: resumed, done: resumeDone}
	defer func() {
		if f.atDispatch != nil {
			f.atDispatch.done() // never looked at
		}
	}()
	if errors.Is(err, errPruned) {
		// The planner writes a run's snapshot before dispatching any of
		// it, and removes it only when it prunes the finished run: a
		// dispatch of a pruned workflow (left in the queue) runs nothing
		// and says nothing, so nothing of the workflow comes back.
		f.log.Warn("dispatch of a workflow that is no more (pruned): nothing runs")
		return nil
	}
	if err != nil {
		return err
	}
	cancelled, later, expired := supersedes(w, d)
	if cancelled || later || x.seenCancelled(d) || expired || x.seenExpired(d) {
		// Nothing starts; what an earlier delivery left running on the
		// host is killed there, and its node ends as it did.
		f.expired = !cancelled && !later && !x.seenCancelled(d)
		return f.stopped(ctx, later)
	}
	f.stop = stop
	go x.watchRunState(stop, d, kill, f.log)
	f.slot = x.hostSlot(d.Ref.Host)
	if f.runner, err = x.Hosts.Runner(transport.TargetOf(d.Host)); err != nil {
		f.runner = unreachable{err}
	}
	f.emitFormula(ctx, dag.FormulaRunning, "")
	states, failed := f.runNodes(ctx)
	f.released.Wait() // every slot is back before the outcome
	if f.err != nil {
		// An outcome is unrecorded: the redelivery decides again.
		return errors.Join(f.err, f.out.Flush(ctx))
	}
	st, why := f.outcome(states, failed)
	countNodes(states, d.Ref.Operation)
	f.log.Info("formula finished", "status", st, "nodes", len(f.pf.Nodes))
	if err := f.out.Flush(ctx); err != nil {
		return err // the outcome follows its nodes' events, stored first
	}
	f.emitFormula(ctx, st, why)
	// The outcome follows the node events in the stream; all are stored
	// before the dispatch is acked. If any failed, the redelivery
	// republishes what is missing (the node records say what happened;
	// message ids drop the duplicates).
	return f.out.Flush(ctx)
}

// formulaRun is one delivery of a dispatch being run.
type formulaRun struct {
	x      *Executor
	d      *events.Dispatch
	pf     *dag.PlannedFormula
	out    Emitter
	runner hostexec.AttemptRunner
	slot   chan struct{}   // the host's capacity
	stop   context.Context // done when the formula is cancelled (or its timeout passed): running nodes are killed
	// expired: the dispatch came after its formula's timeout passed, and
	// starts nothing (see stopped).
	expired bool
	sent    time.Time // when the dispatch was published (zero: unknown)
	// again: the dispatch was delivered before (here or elsewhere), so
	// its nodes may be recorded already: each node's record is read
	// before anything about it is said or taken.
	again    bool
	started  time.Time
	span     trace.SpanContext // the formula's span (invalid: untraced)
	log      *slog.Logger
	errMu    sync.Mutex
	err      error          // the first node outcome that could not be recorded
	released sync.WaitGroup // slots being given back
	// unstarted counts the nodes not started yet: once none is left, an
	// ended node's slots go back at once instead of waiting for a next node.
	unstarted atomic.Int32
	// rechecked is the time from which what is emitted is looked for in
	// the stream before it is sent (zero: it is not; see recheck).
	recheckMu sync.Mutex
	rechecked time.Time
	// atDispatch is the run state read when the dispatch came, which the
	// first look for a pause uses (paused) when nothing was read or waited
	// for since (lookAgain).
	atDispatch *readState
}

// lookAgain makes the first look for a pause read the run state again:
// something was read or waited for since the dispatch's read (a retry's
// nodes not run again, events of nodes blocked or cancelled before any
// starts), during which a pause may have been answered.
func (f *formulaRun) lookAgain() {
	if f.atDispatch != nil {
		f.atDispatch.done()
		f.atDispatch = nil
	}
}

// readState is a run state read, and the wait for a resume registered
// before it was read (a resume after the read wakes the pause it shows).
type readState struct {
	w       events.RunSnapshot
	resumed <-chan struct{}
	done    func()
}

// recheck says an earlier delivery of the dispatch may have stored, since
// about since, what is emitted from now on: each is looked for first
// (Emitter.Recheck). It only ever goes further back.
func (f *formulaRun) recheck(since time.Time) {
	f.recheckMu.Lock()
	defer f.recheckMu.Unlock()
	if since.IsZero() || !f.rechecked.IsZero() && !since.Before(f.rechecked) {
		return
	}
	f.rechecked = since
	f.out.Recheck(since)
}

// emitLookedFor is emitNodeOf of an event that may have been stored
// since about since, earlier than anything this delivery otherwise looks
// for: it is looked for in the stream from then on before it is sent,
// and what is emitted after it as before.
func (f *formulaRun) emitLookedFor(ctx context.Context, since time.Time, ref events.Ref, j int, ev *events.NodeEvent, attempt int) {
	f.recheckMu.Lock()
	defer f.recheckMu.Unlock()
	earlier := f.rechecked.IsZero() || since.Before(f.rechecked)
	if earlier {
		f.out.Recheck(since)
	}
	f.emitNodeOf(ctx, ref, j, ev, attempt)
	if earlier {
		f.out.Recheck(f.rechecked) // zero: nothing looked for, as before
	}
}

// release gives a lease back without waiting; Run waits for it before the
// formula's outcome.
func (f *formulaRun) release(l *slots.Lease) {
	f.released.Add(1)
	go func() { defer f.released.Done(); l.Release() }()
}

func (f *formulaRun) releaseAll(ls []*slots.Lease) {
	for _, l := range ls {
		f.release(l)
	}
}

type nodeResult struct {
	index int
	state dag.NodeState
	kept  *slots.Lease // the slots its last attempt held, to hand over
}

// runNodes runs the nodes as dag.NodeStep says until none is left, and
// returns their states and the names of the failed ones.
func (f *formulaRun) runNodes(ctx context.Context) ([]dag.NodeState, []string) {
	states := make([]dag.NodeState, len(f.pf.Nodes))
	for i := range states {
		states[i] = dag.NodePending
	}
	results := make(chan nodeResult, len(f.pf.Nodes))
	running := 0
	// Leases of nodes that ended, handed to the nodes started next (a node
	// of the same dispatch needs the same slots); any left over are given
	// back before waiting for the next result, or on return. Each is given
	// back once: whatever is released leaves spare.
	var spare []*slots.Lease
	defer func() { f.releaseAll(spare) }()
	defer f.x.unhold(f) // no longer held by a pause, whatever ended it
	f.unstarted.Store(int32(len(f.pf.Nodes)))
	failed, held := f.holdNodes(ctx, states)
	if f.err != nil {
		return states, failed // a held node's record could not be read: the redelivery decides
	}
	for {
		step := f.pf.NodeStep(states, f.stop.Err() != nil, f.d.OnFailure == dag.OnFailureContinue)
		if len(step.Blocked) > 0 || len(step.Cancelled) > 0 {
			f.lookAgain() // their events are waited for first
		}
		for _, b := range step.Blocked {
			states[b.Node] = dag.NodeBlocked
			f.emitNode(ctx, b.Node, &events.NodeEvent{Status: dag.NodeBlocked, Blocker: f.pf.Nodes[b.Blocker].Name}, 0)
		}
		for _, j := range step.Cancelled {
			states[j] = dag.NodeCancelled
			f.emitNode(ctx, j, &events.NodeEvent{Status: dag.NodeCancelled, Reason: f.cancelReason(failed)}, 0)
		}
		if startsAny(step.Start, held) {
			if p, ok := f.paused(ctx); ok {
				// Paused: nothing new starts; what runs finishes (its
				// result taken, its slots given back) until it goes on.
				f.releaseAll(spare)
				spare = nil
				f.x.hold(f, time.Now().UTC())
				outcome, r := f.waitPaused(p, results)
				p.done()
				switch outcome {
				case pauseStopping:
					f.fail(fmt.Errorf("%w: the workflow is paused", ErrStopping))
				case pauseResult:
					running--
					spare, failed = f.took(r, states, spare, failed)
				}
				if f.unrecorded() {
					return f.drain(results, states, running, &spare), failed
				}
				continue
			}
			f.x.unhold(f)
		}
		if f.unrecorded() {
			return f.drain(results, states, running, &spare), failed // an end could not be stored: nothing more starts
		}
		again := false
		for _, j := range step.Start {
			if held[j] { // not retried, and nothing it waits for failed: it stays as it was
				states[j] = dag.NodeCancelled
				f.emitNode(ctx, j, &events.NodeEvent{Status: dag.NodeCancelled, Reason: notRetried}, 0)
				again = true
				continue
			}
			states[j] = dag.NodeRunning
			running++
			f.unstarted.Add(-1)
			var handed *slots.Lease
			if n := len(spare); n > 0 {
				handed, spare = spare[n-1], spare[:n-1]
			}
			go func(j int) { results <- f.runNode(ctx, j, handed) }(j)
		}
		if again {
			continue // step again: what the held nodes took is free
		}
		f.releaseAll(spare)
		spare = nil
		if step.Done && running == 0 {
			return states, failed
		}
		r := <-results
		running--
		spare, failed = f.took(r, states, spare, failed)
		if f.unrecorded() {
			return f.drain(results, states, running, &spare), failed
		}
	}
}

// took takes a node's result in: its state, the lease it kept (for the
// next node), and its name among the failed when it failed (unless its
// outcome went unrecorded).
func (f *formulaRun) took(r nodeResult, states []dag.NodeState, spare []*slots.Lease, failed []string) ([]*slots.Lease, []string) {
	states[r.index] = r.state
	if r.kept != nil {
		spare = append(spare, r.kept)
	}
	if r.state == dag.NodeFailed && !f.unrecorded() {
		failed = append(failed, f.pf.Nodes[r.index].Name)
	}
	return spare, failed
}

// drain waits for the running nodes of a formula whose outcome could not
// be recorded: the dispatch is delivered again and decided from the
// records. Nothing more starts here, and no node is blocked or cancelled
// for it. Their leases join spare, given back on return.
func (f *formulaRun) drain(results <-chan nodeResult, states []dag.NodeState, running int, spare *[]*slots.Lease) []dag.NodeState {
	for ; running > 0; running-- {
		r := <-results
		states[r.index] = r.state
		if r.kept != nil {
			*spare = append(*spare, r.kept)
		}
	}
	return states
}

// startsAny says whether a step starts a node (one a retry holds does
// not start).
func startsAny(start []int, held map[int]bool) bool {
	for _, j := range start {
		if !held[j] {
			return true
		}
	}
	return false
}

func (f *formulaRun) unrecorded() bool {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	return f.err != nil
}

func (f *formulaRun) cancelReason(failed []string) string {
	if f.pastDeadline() {
		return "not started: " + f.deadline()
	}
	if f.stop.Err() != nil {
		return f.cancelWhy() + ": not started"
	}
	return "on_failure " + string(f.d.OnFailure) + ": " + strings.Join(failed, ", ") + " failed"
}

// cancelWhy says what stopped the formula: "cancelled by operator" (a
// cancel, by whom when the cancel event said), "cancelled: formula f's
// timeout of 3s passed".
func (f *formulaRun) cancelWhy() string {
	if f.pastDeadline() {
		return "cancelled: " + f.deadline()
	}
	var c *cancelRequest
	if f.stop != nil && errors.As(context.Cause(f.stop), &c) {
		return c.Error()
	}
	return "cancelled by request"
}

// pastDeadline says the formula is stopped because its timeout passed.
func (f *formulaRun) pastDeadline() bool {
	return f.expired || (f.stop != nil && errors.Is(context.Cause(f.stop), errDeadline))
}

// deadline says whose timeout passed.
func (f *formulaRun) deadline() string {
	if f.d.Timeout > 0 {
		return fmt.Sprintf("formula %s's timeout of %s passed", f.d.Formula, f.d.Timeout)
	}
	return fmt.Sprintf("formula %s's timeout passed", f.d.Formula)
}

// deadlineFailure is why a formula stopped for its deadline failed: its
// nodes that had not ended (killed, or never started), and those that
// failed before.
func (f *formulaRun) deadlineFailure(states []dag.NodeState, failed []string) string {
	var unfinished []string
	for j, st := range states {
		if !st.Done() && st != dag.NodeFailed {
			unfinished = append(unfinished, f.pf.Nodes[j].Name)
		}
	}
	why := fmt.Sprintf("%s: %s with %d node(s) unfinished (%s)", events.ReasonDeadline, f.deadline(), len(unfinished), strings.Join(unfinished, ", "))
	if len(failed) > 0 {
		why += "; node(s) failed: " + strings.Join(failed, ", ")
	}
	return events.BoundError(why)
}

// outcome is the formula's final state, and why when it failed.
func (f *formulaRun) outcome(states []dag.NodeState, failed []string) (dag.FormulaState, string) {
	switch {
	case f.pastDeadline() && !allDone(states):
		return dag.FormulaFailed, f.deadlineFailure(states, failed)
	case len(failed) > 0:
		return dag.FormulaFailed, events.BoundError("node(s) failed: " + strings.Join(failed, ", "))
	case f.stop.Err() != nil && !allDone(states):
		return dag.FormulaCancelled, ""
	case !allDone(states): // only nodes a retry left out can be
		return dag.FormulaFailed, "node(s) not retried"
	}
	return dag.FormulaSucceeded, ""
}

// fail keeps the first error that leaves the outcome unrecorded; Run
// returns it so the dispatch is delivered again.
func (f *formulaRun) fail(err error) {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func allDone(states []dag.NodeState) bool {
	for _, s := range states {
		if !s.Done() {
			return false
		}
	}
	return true
}

// plannedFormula rebuilds the node graph of a dispatch for dag.NodeStep.
func plannedFormula(d *events.Dispatch) (*dag.PlannedFormula, error) {
	idx := make(map[string]int, len(d.Nodes))
	pf := &dag.PlannedFormula{ID: d.Formula, Server: d.Ref.Host, MaxParallel: d.MaxParallel, Nodes: make([]dag.PlannedNode, len(d.Nodes))}
	for i, n := range d.Nodes {
		idx[n.Name] = i
		pf.Nodes[i].Name = n.Name
	}
	for i, n := range d.Nodes {
		for _, dep := range n.DependsOn {
			pf.Nodes[i].Deps = append(pf.Nodes[i].Deps, idx[dep])
		}
	}
	for _, name := range d.Order {
		pf.NodeOrder = append(pf.NodeOrder, idx[name])
	}
	// The order must be topological, or NodeStep would wait forever.
	pos := make([]int, len(pf.NodeOrder))
	for p, j := range pf.NodeOrder {
		pos[j] = p
	}
	for j, n := range pf.Nodes {
		for _, k := range n.Deps {
			if pos[k] >= pos[j] {
				return nil, fmt.Errorf("dispatch order puts %s before its dependency %s", n.Name, pf.Nodes[k].Name)
			}
		}
	}
	return pf, nil
}

// msgID is the Nats-Msg-Id of a transition: the same transition of the
// same attempt in the same generation is stored once.
func msgID(r events.Ref, node, what string, attempt int) string {
	return events.MsgID(r.WorkflowID, strconv.Itoa(r.Generation), r.Formula, node, what, strconv.Itoa(attempt))
}

// emitFormula publishes a formula transition of this delivery.
func (f *formulaRun) emitFormula(ctx context.Context, st dag.FormulaState, why string) {
	ref := f.d.Ref
	ref.Node = ""
	if f.unrecorded() {
		return // see emitNodeOf
	}
	ev := &events.FormulaEvent{Ref: ref, Status: st, Run: events.Run{Attempt: f.d.Generation, StartedAt: &f.started, Error: why}}
	if st != dag.FormulaRunning {
		now := time.Now().UTC()
		ev.EndedAt = &now
	}
	f.out.Emit(ctx, events.HostLifecycle(ref.Host), ev, msgID(ref, "", "formula-"+string(st), 0))
}

// emitNode publishes a node transition.
func (f *formulaRun) emitNode(ctx context.Context, j int, ev *events.NodeEvent, attempt int) {
	f.emitNodeOf(ctx, f.d.Ref, j, ev, attempt)
}

// emitNodeOf publishes a node transition of ref's generation (the
// dispatch's, or an earlier one's attempt announced again), with the
// node's spec hash unless ev has the attempt's. An end (any state but
// running) goes out only once every event emitted before it is stored
// (flushEarlier), so it never lands before the running it follows.
func (f *formulaRun) emitNodeOf(ctx context.Context, ref events.Ref, j int, ev *events.NodeEvent, attempt int) {
	if f.unrecorded() {
		return // what came before is not stored: nothing goes out after it, the redelivery decides
	}
	if ev.Status != dag.NodeRunning && !f.flushEarlier(ctx) {
		return
	}
	n := f.d.Nodes[j]
	ev.Ref = ref
	ev.Node = n.Name
	ev.Attempt = attempt
	if ev.SpecHash == "" {
		ev.SpecHash = n.SpecHash
	}
	ev.MaxAttempts = n.Retry.MaxAttempts
	ev.Actor = f.x.Actor
	what := string(ev.Status)
	if ev.WillRetry {
		what += "-retry"
	}
	f.out.Emit(tracing.Context(ctx, f.span, f.nodeSpan(j)), events.HostLifecycle(ref.Host), ev, msgID(ref, n.Name, what, attempt))
}

// flushEarlier stores every event emitted so far before an end is
// emitted. An event published without waiting can be lost in flight (a
// partition between the server the executor is connected to and the
// stream's leader) while a later one gets through once the partition
// heals: the earlier one, sent again at the flush, would then be stored
// after it (a node running after it succeeded). When the flush fails,
// the end is not emitted and the formula fails with it: its redelivery
// announces the attempt again, then its end (runningAgain).
func (f *formulaRun) flushEarlier(ctx context.Context) bool {
	if err := f.out.Flush(ctx); err != nil {
		f.fail(fmt.Errorf("store the events before a node's end: %w", err))
		return false
	}
	return true
}

func (x *Executor) hostSlot(host string) chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sems == nil {
		x.sems = map[string]chan struct{}{}
	}
	s, ok := x.sems[host]
	if !ok {
		n := x.PerHost
		if n <= 0 {
			n = 8
		}
		s = make(chan struct{}, n)
		x.sems[host] = s
	}
	return s
}

func (x *Executor) secrets() Secrets {
	if x.Secrets == nil {
		return &secrets.Dir{} // no secrets directory: each lookup says so
	}
	return x.Secrets
}

func (x *Executor) sources() Sources {
	if x.Sources == nil {
		return &hostfile.Dir{} // no files directory: each read says so
	}
	return x.Sources
}

// unreachable is the runner of a host that cannot be reached at all (no
// usable transport or credentials): every attempt fails, permanently.
type unreachable struct{ err error }

func (u unreachable) Run(context.Context, hostexec.Command) (hostexec.Result, error) {
	return u.fail()
}

func (u unreachable) RunAttempt(context.Context, hostexec.Attempt) (hostexec.Result, error) {
	return u.fail()
}

func (u unreachable) Settle(context.Context, hostexec.Attempt) (hostexec.Result, error) {
	return u.fail()
}

func (u unreachable) fail() (hostexec.Result, error) {
	if errors.Is(u.err, transport.ErrLocalNotAllowed) {
		return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: %w", errRefused, u.err) // reachable, but not here
	}
	return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: %w", errUnreachable, u.err)
}

// errRefused: this worker does not run the host's commands (transport
// local without --allow-local); retrying here cannot help.
var errRefused = errors.New("nothing ran")

var errUnreachable = errors.New("host unreachable")

const notRetried = "not retried: the retry named other nodes"

// holdNodes sets up the nodes a retry limited to other nodes leaves as
// they were (events.WorkNode.NotRetried): one recorded done stays done,
// one recorded failed is failed again without running (it fails the
// formula, but as a step state it only blocks what depends on it, and
// does not stop the retried nodes under on_failure stop); any other is
// returned held, to be blocked or cancelled when its turn comes instead
// of starting. It returns the held failures' names.
func (f *formulaRun) holdNodes(ctx context.Context, states []dag.NodeState) ([]string, map[int]bool) {
	var failed []string
	var held map[int]bool
	for j, n := range f.d.Nodes {
		if !n.NotRetried {
			continue
		}
		f.lookAgain() // records are read, and ends sent, before any node starts
		key := events.NodeKey(f.d.WorkflowID, f.d.Operation, f.d.Formula, n.Name)
		rec, _, err := f.x.Records.Get(ctx, key)
		switch {
		case err == nil && rec.Status.Done():
			states[j] = rec.Status
			f.emitNode(ctx, j, &events.NodeEvent{Status: rec.Status, Run: events.Run{ExitCode: rec.ExitCode}, Reason: "already recorded " + string(rec.Status)}, rec.Attempt)
			continue
		case err == nil && rec.Status == dag.NodeFailed:
			states[j] = dag.NodeBlocked
			failed = append(failed, n.Name)
			f.emitNode(ctx, j, &events.NodeEvent{Status: dag.NodeFailed, Run: events.Run{ExitCode: rec.ExitCode, Error: notRetried}}, rec.Attempt)
			continue
		case err != nil && !errors.Is(err, events.ErrNoRecord) && !errors.Is(err, events.ErrBadRecord):
			f.fail(fmt.Errorf("node %s: %w", n.Name, err))
		}
		if held == nil {
			held = map[int]bool{}
		}
		held[j] = true
	}
	return failed, held
}
