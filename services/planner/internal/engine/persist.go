package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// unknown is nil when the authoritative copy confirms that a workflow the
// replica read does not hold is unknown, and an error (the work is tried
// again later) when it is held there: a replica behind the others (cut
// off in a partition) does not hold a workflow accepted since, and an
// event of it ignored would leave its run stuck.
func (e *Engine) unknown(ctx context.Context, id string) error {
	absent, err := e.Workflows.Absent(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("workflow %s was not found; confirming it: %w", id, err)
	case !absent:
		return fmt.Errorf("workflow %s: %w", id, errReplicaBehind)
	}
	return nil
}

// errReplicaBehind: a record read is not found where the stream's leader
// holds it.
var errReplicaBehind = errors.New("not found on the replica read, but held by the leader (a replica behind)")

// load returns the run of a workflow from the cache, else from the stores.
// It returns nil, nil for a workflow that does not exist.
//
// A run in memory is used only once its records are known to be those
// saved last: another planner replica may have stepped it, or taken a
// control request for it, since this one saved it. The first use of a
// cached run in each unit of work reads both records again (two reads of
// small records) and drops the copy when either moved on; without that,
// a replica stepped its stale copy and acted on it (dispatching work in a
// workflow another replica had paused, or after a failure that stopped
// it) before its compare-and-set write found out.
func (e *Engine) load(ctx context.Context, id string) (*run, error) {
	if r, ok := e.cache[id]; ok {
		current, err := e.current(ctx, r)
		if err != nil || current {
			return r, err
		}
		delete(e.cache, id)
	}
	rec, recRev, err := e.Workflows.Get(ctx, id)
	if errors.Is(err, events.ErrNoRecord) {
		return nil, e.unknown(ctx, id)
	}
	if err != nil {
		return nil, fmt.Errorf("load workflow %s: %w", id, err)
	}
	r := &run{rec: &rec, recRev: recRev, plan: rec.plan(), done: rec.alreadyDone()}
	if r.snap, r.snapRev, err = e.Runs.Get(ctx, id); err != nil {
		return nil, fmt.Errorf("load run %s: %w", id, err)
	}
	again := r.snap.Generation < rec.Generation
	if again {
		r.state, err = e.beginAgain(ctx, r)
	} else {
		r.state, err = restore(r.plan, r.snap)
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	r.carry()
	if err := e.announceLeft(ctx, r); err != nil {
		return nil, err
	}
	e.repairStatus(r)
	e.cacheRun(r)
	e.awaitCancel(r)
	e.arm(r)
	e.waitingAgain(r)
	r.checked = true
	e.checked = append(e.checked, r)
	if again {
		// What the unit that began it dispatched may be stored, maybe
		// longer ago than the duplicate window: each is looked for first.
		restore := e.recheckFrom(r.rec.Began.At)
		err := e.advance(ctx, r)
		restore()
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// beginAgain is the state the record's generation began with, when the
// run snapshot is of the generation before: the unit of work that began
// it (a retry, a rollback) wrote the record, then stopped before its
// dispatches were stored or its snapshot written. The record says how the
// generation began (Record.Began); load then steps the run, which
// dispatches what the unit did not.
func (e *Engine) beginAgain(ctx context.Context, r *run) (*dag.RunState, error) {
	b, err := e.began(ctx, r)
	if err != nil {
		return nil, err
	}
	r.rec.Began = &b // written with the record's next write; load looks for its dispatches from b.At
	e.Log.Warn("run state of the generation before its workflow record's: beginning the generation again",
		"workflow_id", r.rec.ID, "generation", r.rec.Generation, "snapshot_generation", r.snap.Generation)
	defer e.touched(r)
	if b.Rollback {
		r.rollbackSnapshot()
		return r.plan.NewRunState(), nil
	}
	state, err := restore(r.plan, r.snap)
	if err != nil {
		return nil, err
	}
	r.state = state
	if err := r.rerun(b.Rerun); err != nil {
		return nil, err
	}
	r.newGenerationSnapshot()
	e.activated(ctx, r.rec)
	return state, nil
}

// began is how the record's generation began: Record.Began, or, in a
// record of a planner before it (with the run snapshot of the generation
// before), what that planner did: a rollback starts its plan afresh (a
// rolled back run takes no retry, so a generation with a rollback is its
// start); a retry ran again what the run left failed, blocked or
// cancelled; a retry of nodes, the nodes it named (the failed ones it
// neither held nor carried), as dag.RetryNodes decides.
func (e *Engine) began(ctx context.Context, r *run) (Began, error) {
	if b := r.rec.Began; b != nil && b.Generation == r.rec.Generation {
		return *b, nil
	}
	b := Began{Generation: r.rec.Generation, At: r.rec.UpdatedAt, Rollback: r.rec.Rollback != nil}
	if b.Rollback {
		return b, nil
	}
	state, err := restore(r.plan, r.snap)
	if err != nil {
		return b, err
	}
	if len(r.rec.Held) == 0 && len(r.rec.Carried) == 0 {
		b.Rerun = (&run{plan: r.plan, state: state}).retried(nil)
		return b, nil
	}
	recorded := func(i, j int) (dag.NodeState, error) {
		pf := &r.plan.Formulas[i]
		return e.nodeState(ctx, r.rec.ID, r.plan.Operation, pf.ID, pf.Nodes[j].Name)
	}
	var named []string
	for i := range r.plan.Formulas {
		pf := &r.plan.Formulas[i]
		if slices.Contains(r.rec.Carried, pf.ID) {
			continue
		}
		for j := range pf.Nodes {
			st, err := recorded(i, j)
			if err != nil {
				return b, err
			}
			if st == dag.NodeFailed && !slices.Contains(r.rec.Held[pf.ID], pf.Nodes[j].Name) {
				named = append(named, pf.ID+"/"+pf.Nodes[j].Name)
			}
		}
	}
	sc, err := r.plan.RetryNodes(state, named, recorded)
	if err != nil {
		return b, fmt.Errorf("the retry of nodes an older planner began: %w", err)
	}
	for _, i := range sc.Rerun {
		b.Rerun = append(b.Rerun, r.plan.Formulas[i].ID)
	}
	return b, nil
}

// newGenerationSnapshot is the snapshot of a retry's new generation, before
// anything of it ran.
func (r *run) newGenerationSnapshot() {
	r.snap.Generation = r.rec.Generation
	r.snap.Status = r.rec.Status
	r.snap.Deadlines, r.snap.Expired = nil, nil
	for id := range r.snap.Failures { // a failure a retry carries stays, with why
		if !slices.Contains(r.rec.Carried, id) {
			delete(r.snap.Failures, id)
		}
	}
}

// rollbackSnapshot is the snapshot of a rollback's generation, before
// anything of it ran: its formulas have no timeout (the composition's still
// holds) and no failure yet.
func (r *run) rollbackSnapshot() {
	r.snap.Generation = r.rec.Generation
	r.snap.Status = r.rec.Status
	r.snap.Deadlines, r.snap.Expired = nil, nil
	r.snap.Failures = nil
}

// alreadyDone is what the run's dispatches mark already done: nothing in a
// rollback (its plan deletes what this run did).
func (r *Record) alreadyDone() map[string]bool {
	if r.Rollback != nil {
		return map[string]bool{}
	}
	return toSet(r.AlreadyDone)
}

// repairStatus gives a run's snapshot the status its workflow record
// holds, when the two differ in one generation. A unit of work writes the
// record first and the snapshot last, so a snapshot write lost to
// another planner replica's (or a crash between the two) leaves the
// snapshot behind; the executors read a pause there. The snapshot is
// written with the unit's commit.
func (e *Engine) repairStatus(r *run) {
	if r.snap.Generation != r.rec.Generation || r.snap.Status == r.rec.Status {
		return
	}
	e.Log.Info("run state behind its workflow record; repaired", "workflow_id", r.rec.ID, "status", r.rec.Status, "was", r.snap.Status)
	r.snap.Status = r.rec.Status
	e.touched(r)
}

// current says whether a cached run's records are still those saved last,
// checked once per unit of work (a run this unit changed is ahead of its
// records, and is current). With watches of both buckets' revisions it
// costs no round trip.
func (e *Engine) current(ctx context.Context, r *run) (bool, error) {
	if r.checked || r.dirty {
		return true, nil
	}
	if e.WorkflowRevs != nil && e.RunRevs != nil {
		if e.WorkflowRevs.Moved(r.rec.ID, r.recRev) || e.RunRevs.Moved(r.rec.ID, r.snapRev) {
			e.Log.Debug("run changed by another planner; reloaded", "workflow_id", r.rec.ID)
			return false, nil
		}
		r.checked = true
		e.checked = append(e.checked, r)
		return true, nil
	}
	_, recRev, err := e.Workflows.Get(ctx, r.rec.ID)
	if err != nil && !errors.Is(err, events.ErrNoRecord) {
		return false, fmt.Errorf("load workflow %s: %w", r.rec.ID, err)
	}
	_, snapRev, err := e.Runs.Get(ctx, r.rec.ID)
	if err != nil && !errors.Is(err, events.ErrNoRecord) {
		return false, fmt.Errorf("load run %s: %w", r.rec.ID, err)
	}
	if recRev != r.recRev || snapRev != r.snapRev {
		e.Log.Debug("run changed by another planner; reloaded", "workflow_id", r.rec.ID)
		return false, nil
	}
	r.checked = true
	e.checked = append(e.checked, r)
	return true, nil
}

// restore is the run state a snapshot holds.
func restore(p *dag.Plan, snap Snapshot) (*dag.RunState, error) {
	if len(snap.Formulas) != len(p.Formulas) {
		return nil, fmt.Errorf("snapshot has %d formulas, plan %d", len(snap.Formulas), len(p.Formulas))
	}
	state := p.NewRunState()
	for i := 0; i < len(snap.Formulas); i++ {
		st, ok := letterStates[snap.Formulas[i]]
		if !ok {
			return nil, fmt.Errorf("bad state %q in snapshot", snap.Formulas[i])
		}
		b, blocked := snap.Blockers[i]
		if !blocked {
			b = -1
		}
		if err := state.SetFormula(i, st, b); err != nil {
			return nil, err
		}
	}
	return state, nil
}

func (e *Engine) cacheRun(r *run) {
	if e.cache == nil {
		e.cache = map[string]*run{}
	}
	e.cache[r.rec.ID] = r
}

// captureSnapshot copies the run state into r.snap.
func (r *run) captureSnapshot() {
	n := len(r.plan.Formulas)
	r.snap.Generation = r.rec.Generation
	b := make([]byte, n)
	r.snap.Blockers = nil
	for i := 0; i < n; i++ {
		b[i] = stateLetters[r.state.Formula(i)]
		if k := r.state.Blocker(i); k >= 0 && r.state.Formula(i) == dag.FormulaBlocked {
			if r.snap.Blockers == nil {
				r.snap.Blockers = map[int]int{}
			}
			r.snap.Blockers[i] = k
		}
	}
	r.snap.Formulas = string(b)
	r.snap.Cancelling = r.stopping()
	// A deadline is kept while its formula is dispatched, not after.
	for id := range r.snap.Deadlines {
		if i, ok := r.plan.Index(id); !ok || !dispatched(r.state.Formula(i)) {
			delete(r.snap.Deadlines, id)
		}
	}
	if len(r.snap.Deadlines) == 0 {
		r.snap.Deadlines = nil
	}
}

// saveSnapshot writes the run state with a compare-and-set, once every
// event emitted is stored. If another writer got there first, the run is
// forgotten and the event will be redelivered against the fresh state.
func (e *Engine) saveSnapshot(ctx context.Context, r *run) error {
	if err := e.Out.Flush(ctx); err != nil {
		return err
	}
	r.captureSnapshot()
	rev, err := e.Runs.Put(ctx, r.rec.ID, r.snap, r.snapRev)
	if err != nil {
		delete(e.cache, r.rec.ID)
		if errors.Is(err, events.ErrChanged) {
			return fmt.Errorf("%w: %w", errStale, err)
		}
		return fmt.Errorf("save run %s: %w", r.rec.ID, err)
	}
	r.snapRev = rev
	return nil
}

// saveRecord writes the workflow record with a compare-and-set, once every
// event emitted is stored; then publishes the workflow events the unit
// decided (Record.Announce), which the record announced, and clears them.
func (e *Engine) saveRecord(ctx context.Context, r *run) error {
	if err := e.Out.Flush(ctx); err != nil {
		return err
	}
	r.rec.Announce, r.announce = r.announce, nil
	if err := e.writeRecord(ctx, r); err != nil {
		return err
	}
	e.ending(ctx, r, r.rec.Announce)
	return e.announce(ctx, r)
}

// announce publishes what r's record announces, waits for it to be
// stored, and writes the record without it. When another planner replica
// wrote the record first, it loaded it announcing them and published them
// itself (the same message ids): nothing is left to clear here.
func (e *Engine) announce(ctx context.Context, r *run) error {
	if len(r.rec.Announce) == 0 {
		return nil
	}
	e.announced(ctx, r)
	if err := e.Out.Flush(ctx); err != nil {
		return err
	}
	r.rec.Announce = nil
	if err := e.writeRecord(ctx, r); err != nil && !errors.Is(err, events.ErrChanged) {
		return err
	}
	return nil
}

// announceLeft publishes what a loaded record still announces: the
// planner that wrote it stopped before it had (or before it cleared
// them), so each is looked for in the stream first.
func (e *Engine) announceLeft(ctx context.Context, r *run) error {
	if len(r.rec.Announce) == 0 {
		return nil
	}
	e.Log.Info("workflow record announces events not known to be published; publishing them", "workflow_id", r.rec.ID, "events", len(r.rec.Announce))
	defer e.recheckFrom(r.rec.UpdatedAt)()
	return e.announce(ctx, r)
}

// writeRecord writes the workflow record with a compare-and-set.
func (e *Engine) writeRecord(ctx context.Context, r *run) error {
	r.rec.UpdatedAt = e.now()
	rev, err := e.Workflows.Put(ctx, r.rec.ID, *r.rec, r.recRev)
	if err != nil {
		delete(e.cache, r.rec.ID)
		return fmt.Errorf("save workflow %s: %w", r.rec.ID, err)
	}
	r.recRev = rev
	return nil
}
