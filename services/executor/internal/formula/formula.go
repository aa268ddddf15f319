// Package formula runs one dispatched formula: its nodes in order (or up to
// max_parallel at once), each with its check, retries and timeout, on the
// formula's host; it publishes every node transition and output line, and
// records attempts so a redelivered formula never runs a succeeded node again.
package formula

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/nats-io/nats.go/jetstream"
)

// Executor runs dispatched formulas.
type Executor struct {
	Hosts   *hostexec.Hosts
	Nodes   jetstream.KeyValue // events.BucketNodes
	Pub     *events.Publisher
	Actor   string
	PerHost int // nodes running at once per host (default 8)
	Log     *slog.Logger
	// Runs is the planner's gantry_runs bucket (run snapshots: small, with
	// the run's status and generation), read to skip work of a workflow
	// that was cancelled, or retried, before its dispatch arrived.
	Runs jetstream.KeyValue

	mu      sync.Mutex
	sems    map[string]chan struct{}
	running map[string]map[*context.CancelFunc]struct{} // workflow id -> cancels of its formulas in flight
}

// CancelWorkflow kills every node of the workflow running here.
func (x *Executor) CancelWorkflow(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for c := range x.running[id] {
		(*c)()
	}
}

func (x *Executor) track(id string, c *context.CancelFunc) func() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.running == nil {
		x.running = map[string]map[*context.CancelFunc]struct{}{}
	}
	if x.running[id] == nil {
		x.running[id] = map[*context.CancelFunc]struct{}{}
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

// cancelled reports whether the planner has cancelled the workflow, or
// moved on to a later generation, so this dispatch must not run.
func (x *Executor) cancelled(ctx context.Context, d *events.Dispatch) bool {
	if x.Runs == nil {
		return false
	}
	e, err := x.Runs.Get(ctx, d.WorkflowID)
	if err != nil {
		return false
	}
	var w events.RunSnapshot
	if json.Unmarshal(e.Value(), &w) != nil {
		return false
	}
	return w.Status == dag.WorkflowCancelled || w.Generation > d.Generation
}

// Record is what the executor keeps per node of a workflow in the
// gantry_nodes bucket. It is written before each attempt and after the
// outcome, so after a crash the next delivery knows how many attempts were
// made and that a succeeded node must not run again.
type Record = events.NodeRecord

// Handle is the consumer handler for decky.*.dispatch.
func (x *Executor) Handle(ctx context.Context, ev *consume.Event) error {
	var d events.Dispatch
	if err := events.DecodeData(ev.Envelope, &d); err != nil {
		return err
	}
	return x.Run(ctx, &d)
}

type nodeResult struct {
	index int
	state dag.NodeState
	err   error
}

// Run runs a formula to its end and publishes its outcome. An error means
// the outcome could not be recorded; the dispatch should be redelivered.
func (x *Executor) Run(ctx context.Context, d *events.Dispatch) error {
	log := x.Log.With("workflow_id", d.WorkflowID, "host", d.Ref.Host, "formula", d.Formula)
	pf, err := plannedFormula(d)
	if err != nil {
		return consume.Poison(err)
	}
	started := time.Now().UTC()
	fref := d.Ref
	fref.Node = ""
	states := make([]dag.NodeState, len(pf.Nodes))
	for i := range states {
		states[i] = dag.NodePending
	}
	if x.cancelled(ctx, d) {
		ev := &events.FormulaEvent{Ref: fref, Status: dag.FormulaCancelled, Run: events.Run{Attempt: d.Generation, EndedAt: &started}}
		log.Info("dispatch of a cancelled or superseded run skipped")
		return x.Pub.Publish(ctx, events.HostLifecycle(d.Ref.Host), ev, msgID(d.Ref, "", "formula-cancelled", 0))
	}
	killCtx, kill := context.WithCancel(ctx)
	defer kill()
	batch := &events.Batch{}
	ctx = withBatch(ctx, batch)
	defer x.track(d.WorkflowID, &kill)()
	runEv := &events.FormulaEvent{Ref: fref, Status: dag.FormulaRunning, Run: events.Run{Attempt: d.Generation, StartedAt: &started}}
	batch.Add(x.Pub.PublishAsync(events.HostLifecycle(d.Ref.Host), runEv, msgID(d.Ref, "", "formula-running", 0)))
	runner, rerr := x.Hosts.Runner(string(d.Host.Transport), d.Host.Address, d.Host.User)
	results := make(chan nodeResult, len(pf.Nodes))
	running := 0
	var publishErr error
	var failedNames []string
	for {
		step := pf.NodeStep(states, killCtx.Err() != nil, d.OnFailure == dag.OnFailureContinue)
		for _, b := range step.Blocked {
			states[b.Node] = dag.NodeBlocked
			x.publishNode(ctx, d, b.Node, &events.NodeEvent{Status: dag.NodeBlocked, Blocker: pf.Nodes[b.Blocker].Name}, 0, &publishErr)
		}
		for _, j := range step.Cancelled {
			states[j] = dag.NodeCancelled
			reason := "cancelled"
			if killCtx.Err() == nil {
				reason = "on_failure " + string(d.OnFailure) + ": " + strings.Join(failedNames, ", ") + " failed"
			}
			x.publishNode(ctx, d, j, &events.NodeEvent{Status: dag.NodeCancelled, Reason: reason}, 0, &publishErr)
		}
		for _, j := range step.Start {
			states[j] = dag.NodeRunning
			running++
			go func(j int) {
				st, err := x.runNode(ctx, killCtx, d, j, runner, rerr, log)
				results <- nodeResult{j, st, err}
			}(j)
		}
		if step.Done && running == 0 {
			break
		}
		r := <-results
		running--
		states[r.index] = r.state
		if r.err != nil && publishErr == nil {
			publishErr = r.err
		}
		if r.state == dag.NodeFailed {
			failedNames = append(failedNames, pf.Nodes[r.index].Name)
		}
	}
	if publishErr != nil {
		return publishErr // the outcome is incomplete: let JetStream redeliver
	}
	ended := time.Now().UTC()
	final := &events.FormulaEvent{Ref: fref, Status: dag.FormulaSucceeded, Run: events.Run{Attempt: d.Generation, StartedAt: &started, EndedAt: &ended}}
	switch {
	case len(failedNames) > 0:
		final.Status = dag.FormulaFailed
		final.Error = events.BoundError("node(s) failed: " + strings.Join(failedNames, ", "))
	case killCtx.Err() != nil && !allDone(states):
		final.Status = dag.FormulaCancelled
	}
	log.Info("formula finished", "status", final.Status, "nodes", len(pf.Nodes))
	// The outcome goes on the same connection after the node events, so it
	// follows them in the stream; all are waited for before the dispatch is
	// acked. If any failed, the redelivery republishes what is missing (the
	// node records say what happened; message ids drop the duplicates).
	batch.Add(x.Pub.PublishAsync(events.HostLifecycle(d.Ref.Host), final, msgID(d.Ref, "", "formula-"+string(final.Status), 0)))
	return batch.Wait(ctx)
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

func (x *Executor) publishNode(ctx context.Context, d *events.Dispatch, j int, ev *events.NodeEvent, attempt int, errp *error) {
	n := d.Nodes[j]
	ev.Ref = d.Ref
	ev.Node = n.Name
	ev.Attempt = attempt
	ev.SpecHash = n.SpecHash
	ev.MaxAttempts = n.Retry.MaxAttempts
	ev.Actor = x.Actor
	what := string(ev.Status)
	if ev.WillRetry {
		what += "-retry"
	}
	subject, id := events.HostLifecycle(d.Ref.Host), msgID(d.Ref, n.Name, what, attempt)
	if b := batchOf(ctx); b != nil {
		b.Add(x.Pub.PublishAsync(subject, ev, id))
		return
	}
	if err := x.Pub.Publish(ctx, subject, ev, id); err != nil && *errp == nil {
		*errp = err
	}
}

type batchKey struct{}

// withBatch makes node events of this formula asynchronous, collected in b
// and waited for before the formula's outcome is published.
func withBatch(ctx context.Context, b *events.Batch) context.Context {
	return context.WithValue(ctx, batchKey{}, b)
}

func batchOf(ctx context.Context) *events.Batch {
	b, _ := ctx.Value(batchKey{}).(*events.Batch)
	return b
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

func (x *Executor) loadRecord(ctx context.Context, key string) (Record, uint64, error) {
	e, err := x.Nodes.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, 0, nil
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("read node record %s: %w", key, err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Record{}, 0, nil // a damaged record is treated as none: the node may run again
	}
	return r, e.Revision(), nil
}

// errRecordExists: a node's first attempt was to be recorded with a
// create, and a record was there (a retry, a redelivery): read it and decide
// again.
var errRecordExists = errors.New("node record exists")

// nodeRecord is one node's record as this delivery knows it. A node whose
// record is unknown is recorded with a create, which fails if one exists:
// most nodes of a run have none yet, and this spares a read per node.
type nodeRecord struct {
	key   string
	rec   Record
	known bool
}

// readRecord reads the node's record into nr (none: a zero record).
func (x *Executor) readRecord(ctx context.Context, nr *nodeRecord) error {
	rec, _, err := x.loadRecord(ctx, nr.key)
	if err != nil {
		return err
	}
	nr.rec, nr.known = rec, true
	return nil
}

func (x *Executor) saveRecord(ctx context.Context, nr *nodeRecord, r Record) error {
	b, _ := json.Marshal(r)
	if !nr.known {
		if _, err := x.Nodes.Create(ctx, nr.key, b); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				return errRecordExists
			}
			return fmt.Errorf("write node record %s: %w", nr.key, err)
		}
		nr.known = true
	} else if _, err := x.Nodes.Put(ctx, nr.key, b); err != nil {
		return fmt.Errorf("write node record %s: %w", nr.key, err)
	}
	nr.rec = r
	return nil
}

// runNode runs one node through its attempts and returns its final state.
// The error is set only when an outcome could not be recorded.
func (x *Executor) runNode(ctx, killCtx context.Context, d *events.Dispatch, j int, runner hostexec.Runner, runnerErr error, log *slog.Logger) (dag.NodeState, error) {
	n := d.Nodes[j]
	log = log.With("node", n.Name)
	nr := &nodeRecord{key: events.NodeKey(d.WorkflowID, d.Operation, d.Formula, n.Name)}
	if n.AlreadyDone {
		if err := x.readRecord(ctx, nr); err != nil {
			return dag.NodeFailed, err
		}
	}
	for range 3 { // a record appears under a create at most once per delivery
		st, err := x.runRecorded(ctx, killCtx, d, j, nr, runner, runnerErr, log)
		if !errors.Is(err, errRecordExists) {
			return st, err
		}
		if err := x.readRecord(ctx, nr); err != nil {
			return dag.NodeFailed, err
		}
	}
	return dag.NodeFailed, fmt.Errorf("node record %s: %w after reading it", nr.key, errRecordExists)
}

// runRecorded is runNode from what nr holds. It returns errRecordExists
// when nr was unknown and a record turned out to exist (nothing started).
func (x *Executor) runRecorded(ctx, killCtx context.Context, d *events.Dispatch, j int, nr *nodeRecord, runner hostexec.Runner, runnerErr error, log *slog.Logger) (dag.NodeState, error) {
	n := d.Nodes[j]
	var perr error
	rec := nr.rec
	if nr.known {
		// Recorded succeeded (or skipped): never again in this workflow.
		if rec.Status.Done() {
			x.publishNode(ctx, d, j, &events.NodeEvent{Status: rec.Status, Run: events.Run{ExitCode: rec.ExitCode}, Reason: "already recorded " + string(rec.Status)}, rec.Attempt, &perr)
			return rec.Status, perr
		}
		if rec.Status == dag.NodeFailed && rec.Generation == d.Generation {
			x.publishNode(ctx, d, j, &events.NodeEvent{Status: dag.NodeFailed, Run: events.Run{ExitCode: rec.ExitCode, Error: "failed earlier in this run"}}, rec.Attempt, &perr)
			return dag.NodeFailed, perr
		}
	}
	if n.AlreadyDone {
		now := time.Now().UTC()
		skipped := Record{Status: dag.NodeSkipped, Attempt: rec.Attempt, Generation: d.Generation, SpecHash: n.SpecHash}
		if err := x.saveRecord(ctx, nr, skipped); err != nil {
			return dag.NodeFailed, err
		}
		x.publishNode(ctx, d, j, &events.NodeEvent{Status: dag.NodeSkipped, Run: events.Run{StartedAt: &now, EndedAt: &now}, Reason: "already succeeded with the same spec"}, skipped.Attempt, &perr)
		return dag.NodeSkipped, perr
	}
	if rec.Generation != d.Generation {
		rec.GenAttempts = 0
	}
	maxAttempts := max(n.Retry.MaxAttempts, 1)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.Multiplier = max(n.Retry.InitialInterval.D(), time.Millisecond), max(n.Retry.MaxInterval.D(), time.Millisecond), max(n.Retry.Multiplier, 1)
	bo.MaxElapsedTime = 0
	bo.Reset()
	slot := x.hostSlot(d.Ref.Host)
	for rec.GenAttempts < maxAttempts {
		// The attempt is recorded right before its process starts
		// (BeforeStart), so the recorded attempts are exactly the attempts
		// that started something on the host, and then announced.
		next := rec
		next.Attempt++
		next.GenAttempts++
		next.Generation, next.Status, next.SpecHash, next.ExitCode = d.Generation, dag.NodeRunning, n.SpecHash, nil
		started := time.Now().UTC()
		var recordErr error
		recorded := false
		record := func() error {
			if recorded {
				return nil
			}
			if recordErr = x.saveRecord(ctx, nr, next); recordErr != nil {
				return recordErr
			}
			recorded = true
			started = time.Now().UTC()
			x.publishNode(ctx, d, j, &events.NodeEvent{Status: dag.NodeRunning, Run: events.Run{StartedAt: &started}}, next.Attempt, &perr)
			return nil
		}
		final, ev, permanent := x.attempt(killCtx, d, j, runner, runnerErr, next.Attempt, slot, record)
		if recordErr != nil {
			return dag.NodeFailed, recordErr // nothing started; the dispatch is redelivered (or, errRecordExists, decided again)
		}
		if perr != nil {
			return dag.NodeFailed, perr
		}
		rec = next
		ended := time.Now().UTC()
		ev.StartedAt, ev.EndedAt = &started, &ended
		retry := final == dag.NodeFailed && !permanent && rec.GenAttempts < maxAttempts && killCtx.Err() == nil
		if !retry {
			rec.Status, rec.ExitCode = final, ev.ExitCode
			if err := x.saveRecord(ctx, nr, rec); err != nil {
				return dag.NodeFailed, err
			}
		}
		if !recorded {
			// Nothing started (no connection, cancelled while waiting for
			// a slot): the attempt is still announced before its outcome.
			x.publishNode(ctx, d, j, &events.NodeEvent{Status: dag.NodeRunning, Run: events.Run{StartedAt: &started}}, rec.Attempt, &perr)
		}
		ev.WillRetry = retry
		x.publishNode(ctx, d, j, ev, rec.Attempt, &perr)
		log.Info("node attempt", "status", final, "attempt", rec.Attempt, "will_retry", retry, "exit_code", ev.ExitCode)
		if !retry {
			return final, perr
		}
		select {
		case <-killCtx.Done():
			rec.Status = dag.NodeCancelled
			if err := x.saveRecord(ctx, nr, rec); err != nil {
				return dag.NodeCancelled, err
			}
			x.publishNode(ctx, d, j, &events.NodeEvent{Status: dag.NodeCancelled, Reason: "cancelled between attempts"}, rec.Attempt, &perr)
			return dag.NodeCancelled, perr
		case <-time.After(bo.NextBackOff()):
		}
	}
	// Attempts were used up by earlier deliveries of this dispatch.
	rec.Status = dag.NodeFailed
	if err := x.saveRecord(ctx, nr, rec); err != nil {
		return dag.NodeFailed, err
	}
	x.publishNode(ctx, d, j, &events.NodeEvent{Status: dag.NodeFailed, Run: events.Run{Error: fmt.Sprintf("no attempts left (%d of %d made; the last was interrupted)", rec.GenAttempts, maxAttempts)}}, rec.Attempt, &perr)
	return dag.NodeFailed, perr
}

// attempt runs the node once: its check (create: exit 0 means skipped;
// check: the verdict) and its command. permanent says retrying cannot help.
func (x *Executor) attempt(ctx context.Context, d *events.Dispatch, j int, runner hostexec.Runner, runnerErr error, attempt int, slot chan struct{}, record func() error) (dag.NodeState, *events.NodeEvent, bool) {
	n := d.Nodes[j]
	ev := &events.NodeEvent{}
	if runnerErr != nil {
		ev.Status, ev.Error = dag.NodeFailed, events.BoundError(runnerErr.Error())
		return dag.NodeFailed, ev, true
	}
	select {
	case slot <- struct{}{}:
	case <-ctx.Done():
		ev.Status, ev.Reason = dag.NodeCancelled, "cancelled before it started"
		return dag.NodeCancelled, ev, true
	}
	defer func() { <-slot }()
	var seq atomic.Int64
	lines := func(s hostexec.Stream, line string) {
		ll := &events.LogLine{Ref: d.Ref, Attempt: attempt, Stream: events.Stream(s), Seq: seq.Add(1), Line: line}
		ll.Node = n.Name
		x.Pub.Fire(events.HostLogs(d.Ref.Host, n.Name), ll)
	}
	run := func(script string) (hostexec.Result, error) {
		return runner.Run(ctx, hostexec.Command{Script: script, Env: n.Env, Timeout: n.Timeout.D(), OnLine: lines, BeforeStart: record})
	}
	fill := func(res hostexec.Result, err error) {
		if res.ExitCode >= 0 || err == nil {
			code := res.ExitCode
			ev.ExitCode = &code
		}
		ev.StdoutTail, ev.StderrTail = events.BoundTail(res.Stdout, events.MaxTailBytes), events.BoundTail(res.Stderr, events.MaxTailBytes)
		if err != nil {
			ev.Error = events.BoundError(err.Error())
		} else if res.ExitCode != 0 {
			ev.Error = fmt.Sprintf("exit status %d", res.ExitCode)
		}
	}
	permanent := func(err error) bool {
		return errors.Is(err, hostexec.ErrHostKeyUnknown) || errors.Is(err, hostexec.ErrHostKeyChanged) || errors.Is(err, hostexec.ErrAuth)
	}
	switch d.Operation {
	case dag.OpCheck:
		if strings.TrimSpace(n.Command) == "" {
			ev.Status, ev.Check, ev.Reason = dag.NodeSucceeded, events.CheckWouldChange, "no check command: cannot tell"
			return dag.NodeSucceeded, ev, false
		}
		res, err := run(n.Command)
		fill(res, err)
		if err != nil {
			ev.Status = dag.NodeFailed
			return dag.NodeFailed, ev, permanent(err)
		}
		ev.Status, ev.Error, ev.Check = dag.NodeSucceeded, "", events.CheckOK
		if res.ExitCode != 0 {
			ev.Check = events.CheckWouldChange
		}
		return dag.NodeSucceeded, ev, false
	case dag.OpCreate:
		if strings.TrimSpace(n.Check) != "" {
			res, err := run(n.Check)
			if err != nil && permanent(err) {
				fill(res, err)
				ev.Status = dag.NodeFailed
				return dag.NodeFailed, ev, true
			}
			if err == nil && res.ExitCode == 0 {
				fill(res, nil)
				ev.Status, ev.Reason = dag.NodeSkipped, "check passed"
				return dag.NodeSkipped, ev, false
			}
		}
	}
	res, err := run(n.Command)
	fill(res, err)
	switch {
	case err == nil && res.ExitCode == 0:
		ev.Status = dag.NodeSucceeded
		return dag.NodeSucceeded, ev, false
	case errors.Is(err, hostexec.ErrCancelled):
		ev.Status, ev.Reason = dag.NodeCancelled, "cancelled: killed on the host"
		return dag.NodeCancelled, ev, true
	}
	ev.Status = dag.NodeFailed
	return dag.NodeFailed, ev, permanent(err)
}
