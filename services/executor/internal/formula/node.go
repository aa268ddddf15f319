package formula

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
)

// nodeRun is one node of a formula run and its record as this delivery
// knows it. A node whose record is unknown is recorded with a create,
// which fails if one exists: most nodes of a run have none yet, and this
// spares a read per node.
type nodeRun struct {
	*formulaRun
	j     int
	n     events.WorkNode
	key   string
	rec   Record
	rev   uint64
	known bool
	log   *slog.Logger
	first time.Time // when this delivery's first attempt (or skip) started, for the node's span
	// handed is the lease of the formula's node that ended last, for the
	// first attempt to keep (takeSlots); kept is the lease this node's
	// last attempt held, for runNodes to hand to the next node.
	handed *slots.Lease
	kept   *slots.Lease
	// released are closed once the slots given back are back.
	released []chan struct{}
	// placed are the paths of the node's files changed since it last
	// succeeded, as the last attempt's file step found them (nil: it did
	// not get that far).
	placed []string
}

// runNode runs node j through its attempts and returns its final state
// and, when its last attempt ended holding a lease of slots, that lease
// (handed: one to start with). A state that could not be recorded is kept
// by f.fail.
func (f *formulaRun) runNode(ctx context.Context, j int, handed *slots.Lease) nodeResult {
	n := f.d.Nodes[j]
	nr := &nodeRun{formulaRun: f, j: j, n: n, key: events.NodeKey(f.d.WorkflowID, f.d.Operation, f.d.Formula, n.Name), log: f.log.With("node", n.Name), handed: handed}
	started := f.x.nodeStarted(f.d, n.Name)
	st, err := nr.run(ctx)
	started(st)
	for _, done := range nr.released {
		<-done
	}
	if err != nil {
		f.fail(fmt.Errorf("node %s: %w", n.Name, err))
	} else {
		nr.recordNode(ctx, st)
	}
	if nr.handed != nil { // never used: nothing was attempted
		f.release(nr.handed)
	}
	return nodeResult{index: j, state: st, kept: nr.kept}
}

func (nr *nodeRun) run(ctx context.Context) (dag.NodeState, error) {
	// A first delivery creates the record when the attempt starts (a
	// create finding one there reads it); a redelivery reads it first, or
	// it would announce a wait for a slot (node.running) for a node an
	// earlier delivery saw succeed, stored after its node.succeeded.
	if nr.n.AlreadyDone || nr.again {
		if err := nr.read(ctx); err != nil {
			return dag.NodeFailed, err
		}
	}
	// Not a Records.Update: what is decided from the record starts work on
	// the host, which a compare-and-set cannot take back; a record changed
	// under the write (ErrChanged) is read and the node decided again
	// before anything starts. A record appears under a create at most
	// once per delivery.
	for range 3 {
		st, err := nr.fromRecord(ctx)
		if !errors.Is(err, events.ErrChanged) {
			return st, err
		}
		// The lease an attempt kept for the next node goes to the
		// attempts decided now, as a lease handed over does (or back at
		// the end): it must not be left held, refreshed, for good.
		if nr.kept != nil {
			if nr.handed != nil { // cannot be: an attempt took the handed one first
				nr.release(nr.handed)
			}
			nr.handed, nr.kept = nr.kept, nil
		}
		if err := nr.read(ctx); err != nil {
			return dag.NodeFailed, err
		}
	}
	return dag.NodeFailed, fmt.Errorf("node record %s changed under every try", nr.key)
}

// errRecordBehind: a node record read is not found where the stream's
// leader holds it (or the leader could not be asked).
var errRecordBehind = errors.New("not found on the replica read; the leader holds it or did not answer")

// read reads the node's record (none: a zero record). A record that does
// not decode reads as none at its revision, and is logged: the node is
// decided from its attempts on the host, not from a damaged record.
func (nr *nodeRun) read(ctx context.Context) error {
	rec, rev, err := nr.x.Records.Get(ctx, nr.key)
	switch {
	case errors.Is(err, events.ErrNoRecord) && nr.again:
		// A redelivery acts on "none" only from the authoritative copy.
		if absent, aerr := nr.x.Records.Absent(ctx, nr.key); aerr != nil || !absent {
			return errors.Join(fmt.Errorf("node record %s: %w", nr.key, errRecordBehind), aerr)
		}
		rec, rev = Record{}, 0
	case errors.Is(err, events.ErrNoRecord):
		rec, rev = Record{}, 0
	case errors.Is(err, events.ErrBadRecord):
		nr.log.Error("node record damaged; it is replaced", "err", err)
		rec = Record{}
	case err != nil:
		return err
	}
	nr.rec, nr.rev, nr.known = rec, rev, true
	if rev > 0 && rec.Generation == nr.d.Generation && !nr.sent.IsZero() {
		nr.recheck(nr.sent) // an earlier delivery got this far, and published
	}
	return nil
}

// save writes r as the node's record: a create when none is known, else a
// compare-and-set on the revision read or written last.
func (nr *nodeRun) save(ctx context.Context, r Record) error {
	rev := nr.rev
	if !nr.known {
		rev = 0
	}
	n, err := nr.x.Records.Put(ctx, nr.key, r, rev)
	if err != nil {
		return err
	}
	nr.rec, nr.rev, nr.known = r, n, true
	return nil
}

// fromRecord runs the node from what its record holds. It returns
// events.ErrChanged when the record turned out to be other than known
// (nothing started): read it and decide again.
func (nr *nodeRun) fromRecord(ctx context.Context) (dag.NodeState, error) {
	rec := nr.rec
	if nr.known {
		// Recorded succeeded (or skipped): never again in this workflow.
		// An end reached in this generation follows its attempt's running,
		// published again (its first copy may be lost); one of an earlier
		// generation is that generation's, reported here as it stands.
		if rec.Status.Done() {
			if rec.Generation == nr.d.Generation {
				nr.runningAgain(ctx, rec)
			}
			nr.emit(ctx, &events.NodeEvent{Status: rec.Status, Run: events.Run{ExitCode: rec.ExitCode}, Reason: "already recorded " + string(rec.Status)}, rec.Attempt)
			return rec.Status, nil
		}
		if rec.Status == dag.NodeFailed && rec.Generation == nr.d.Generation {
			nr.runningAgain(ctx, rec)
			nr.emit(ctx, &events.NodeEvent{Status: dag.NodeFailed, Run: events.Run{ExitCode: rec.ExitCode, Error: "failed earlier in this run"}}, rec.Attempt)
			return dag.NodeFailed, nil
		}
		// Cancelled in this generation (its workflow was cancelled: only a
		// retry, a new generation, runs it again).
		if rec.Status == dag.NodeCancelled && rec.Generation == nr.d.Generation {
			nr.runningAgain(ctx, rec)
			nr.emit(ctx, &events.NodeEvent{Status: dag.NodeCancelled, Reason: "cancelled"}, rec.Attempt)
			return dag.NodeCancelled, nil
		}
	}
	if nr.n.AlreadyDone && len(nr.n.Files) == 0 {
		// (A node with files is compared with its host all the same: a
		// file changed there by hand is put back.)
		return nr.skip(ctx)
	}
	return nr.attempts(ctx)
}

// skip records and announces a node the per-host projection says is done.
func (nr *nodeRun) skip(ctx context.Context) (dag.NodeState, error) {
	now := time.Now().UTC()
	skipped := Record{Status: dag.NodeSkipped, Attempt: nr.rec.Attempt, Generation: nr.d.Generation, SpecHash: nr.n.SpecHash}
	if err := nr.save(ctx, skipped); err != nil {
		return dag.NodeFailed, err
	}
	nr.first = now
	nr.emit(ctx, &events.NodeEvent{Status: dag.NodeSkipped, Run: events.Run{StartedAt: &now, EndedAt: &now}, Reason: "already succeeded with the same spec"}, skipped.Attempt)
	return dag.NodeSkipped, nil
}

// attempts runs the attempts the node's policy leaves in this generation.
// An attempt recorded running in this generation was interrupted here (a
// restart, a redelivery): it is resumed, re-attaching to its command on
// the host, and does not count again.
func (nr *nodeRun) attempts(ctx context.Context) (dag.NodeState, error) {
	if nr.rec.Status == dag.NodeRunning && nr.rec.Generation < nr.d.Generation && nr.rec.Attempt > 0 {
		// An attempt of an earlier generation that nobody followed to its
		// end (its executor died, and its workflow was cancelled before
		// another re-attached): it is ended on the host first, and a
		// success found there stands.
		st, ev, err := nr.settle(ctx)
		if err != nil {
			return dag.NodeFailed, err
		}
		if st.Done() {
			if ev == nil {
				ev = &events.NodeEvent{Status: st, Run: events.Run{ExitCode: nr.rec.ExitCode}}
			}
			nr.runningAgain(ctx, nr.rec)
			ev.Reason = "already recorded " + string(st) + ": attempt " + strconv.Itoa(nr.rec.Attempt) + " of generation " + strconv.Itoa(nr.rec.Generation) + " ended on the host while no executor followed it"
			nr.emit(ctx, ev, nr.rec.Attempt)
			return st, nil
		}
	}
	if nr.rec.Generation != nr.d.Generation {
		nr.rec.GenAttempts = 0
	}
	maxAttempts := max(nr.n.Retry.MaxAttempts, 1)
	bo := nr.backoff()
	interrupted := nr.rec.Status == dag.NodeRunning && nr.rec.Generation == nr.d.Generation && nr.rec.GenAttempts > 0
	if interrupted {
		nr.log.Info("resuming an interrupted attempt", "attempt", nr.rec.Attempt)
	}
	for interrupted || nr.rec.GenAttempts < maxAttempts {
		next := nr.rec
		if !interrupted {
			next.Attempt++
			next.GenAttempts++
			next.StartedAt = nil // its own, once it starts
		}
		interrupted = false
		final, retry, err := nr.once(ctx, next, maxAttempts)
		if err != nil || !retry {
			return final, err
		}
		select {
		case <-nr.stop.Done():
			return nr.cancelBetween(ctx)
		case <-nr.x.stopping():
			// The redelivery resumes from the record: the attempt that
			// ended is read again from the host, then the next one is due.
			return dag.NodeFailed, fmt.Errorf("%w: between two attempts", ErrStopping)
		case <-time.After(bo.NextBackOff()):
		}
	}
	// Attempts were used up by earlier deliveries of this dispatch.
	rec := nr.rec
	rec.Status = dag.NodeFailed
	if err := nr.save(ctx, rec); err != nil {
		return dag.NodeFailed, err
	}
	nr.runningAgain(ctx, rec)
	nr.emit(ctx, &events.NodeEvent{Status: dag.NodeFailed, Run: events.Run{Error: fmt.Sprintf("no attempts left (%d of %d made)", rec.GenAttempts, maxAttempts)}}, rec.Attempt)
	return dag.NodeFailed, nil
}

func (nr *nodeRun) backoff() *backoff.ExponentialBackOff {
	r := nr.n.Retry
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.Multiplier = max(r.InitialInterval.D(), time.Millisecond), max(r.MaxInterval.D(), time.Millisecond), max(r.Multiplier, 1)
	bo.MaxElapsedTime = 0
	bo.Reset()
	return bo
}

func (nr *nodeRun) cancelBetween(ctx context.Context) (dag.NodeState, error) {
	rec := nr.rec
	rec.Status = dag.NodeCancelled
	if err := nr.save(ctx, rec); err != nil {
		return dag.NodeCancelled, err
	}
	nr.emit(ctx, &events.NodeEvent{Status: dag.NodeCancelled, Reason: "cancelled between attempts"}, rec.Attempt)
	return dag.NodeCancelled, nil
}

// once makes attempt next (or resumes it). The attempt is recorded right
// before its process starts (hostexec's BeforeStart), so the recorded
// attempts are exactly those that started something on the host, and then
// announced. retry says another attempt is due. The record holds the
// attempt's start, as its running says it: an attempt resumed keeps it,
// and is announced again as it was first.
func (nr *nodeRun) once(ctx context.Context, next Record, maxAttempts int) (dag.NodeState, bool, error) {
	next.Generation, next.Status, next.SpecHash, next.ExitCode = nr.d.Generation, dag.NodeRunning, nr.n.SpecHash, nil
	started := time.Now().UTC()
	resumed := next.StartedAt != nil
	if resumed {
		started = *next.StartedAt
	}
	recorded := false
	var recordErr error
	record := func() error {
		if !recorded && !resumed { // its first script's start (a check's, then its command's)
			started = time.Now().UTC()
		}
		at := started
		next.StartedAt, next.NeverStarted = &at, false // it starts now
		if recordErr = nr.save(ctx, next); recordErr != nil {
			return recordErr
		}
		recorded = true
		nr.emit(ctx, &events.NodeEvent{Status: dag.NodeRunning, GenAttempt: next.GenAttempts, Run: events.Run{StartedAt: &at}}, next.Attempt)
		return nil
	}
	final, ev, permanent, held, busErr := nr.attempt(next.Attempt, record)
	if recordErr != nil {
		held.giveBackNow()                      // the node is decided again, or redelivered: maybe another attempt
		return dag.NodeFailed, false, recordErr // nothing started; decided again (ErrChanged) or redelivered
	}
	if busErr != nil {
		held.giveBackNow()
		return dag.NodeFailed, false, busErr // nothing started and nothing counted: redelivered
	}
	rec := next
	if rec.StartedAt == nil { // nothing started: announced from when it was due
		at := started
		rec.StartedAt = &at
	}
	ended := time.Now().UTC()
	if ev.EndedAt != nil {
		ended = *ev.EndedAt
	}
	ev.StartedAt, ev.EndedAt = &started, &ended
	retry := final == dag.NodeFailed && !permanent && rec.GenAttempts < maxAttempts && nr.stop.Err() == nil
	rec.Changed = nr.changedAfter(final, rec)
	switch {
	case retry:
		held.giveBackNow() // before the next attempt takes them again
	case held.lease != nil && nr.unstarted.Load() > 0:
		// The node's last attempt, and nodes may start after it: its lease
		// goes to runNodes, which hands it to the next node it starts or
		// gives it back.
		nr.kept = held.lease
	default:
		nr.giveBack(held)
	}
	startedNothing := !recorded && !resumed
	if !retry {
		rec.Status, rec.ExitCode = final, ev.ExitCode
		rec.NeverStarted = startedNothing && nr.neverStarted()
		if err := nr.saveOutcome(ctx, rec); err != nil {
			return dag.NodeFailed, false, err
		}
	} else if err := nr.keepChanged(ctx, rec); err != nil {
		return dag.NodeFailed, false, err
	}
	if !recorded {
		// Nothing started (no connection, cancelled while waiting for a
		// slot): the attempt is still announced before its outcome.
		nr.emit(ctx, &events.NodeEvent{Status: dag.NodeRunning, GenAttempt: rec.GenAttempts, Run: events.Run{StartedAt: &started}, NotStarted: startedNothing}, rec.Attempt)
	}
	ev.WillRetry, ev.GenAttempt, ev.NotStarted = retry, rec.GenAttempts, startedNothing
	nr.emit(ctx, ev, rec.Attempt)
	if nr.first.IsZero() {
		nr.first = started
	}
	nr.recordAttempt(ctx, ev, rec.Attempt, started, ended)
	nr.log.Info("node attempt", "status", final, "attempt", rec.Attempt, "will_retry", retry, "exit_code", ev.ExitCode)
	return final, retry, nil
}

// keepChanged keeps, between an attempt that failed and the next, the
// record as it is (running, written by BeforeStart, or not at all), but
// writes it again when the attempt placed files: the next attempt, maybe
// after a restart, finds them in place and must still name them in
// $GANTRY_CHANGED.
func (nr *nodeRun) keepChanged(ctx context.Context, rec Record) error {
	if nr.placed == nil || slices.Equal(nr.placed, nr.rec.Changed) {
		nr.rec = rec
		return nil
	}
	return nr.save(ctx, rec)
}

// neverStarted says no earlier attempt of the node in this run started
// anything on its host: none is recorded, or the one recorded says so.
func (nr *nodeRun) neverStarted() bool {
	return !nr.known || nr.rev == 0 || nr.rec.NeverStarted
}

// changedAfter is what the node's record keeps, after an attempt that
// ended final, of the paths its files changed: none once the node
// succeeded (its run had them in $GANTRY_CHANGED), else those changed by
// the attempts since, for the next attempt's $GANTRY_CHANGED (a retry, a
// `gantry retry`).
func (nr *nodeRun) changedAfter(final dag.NodeState, rec Record) []string {
	switch {
	case final == dag.NodeSucceeded || final == dag.NodeSkipped:
		return nil
	case nr.placed != nil:
		return nr.placed
	}
	return rec.Changed
}

// giveBack gives an ended attempt's slots back while the caller goes on
// (recording its outcome: two writes to different buckets, at once); it
// is done before run returns, so before the next attempt or node of this
// formula takes slots.
func (nr *nodeRun) giveBack(h hold) {
	if h.free == nil {
		return
	}
	done := make(chan struct{})
	go func() { defer close(done); h.free() }()
	nr.released = append(nr.released, done)
}

// giveBackNow gives the slots back and returns once they are.
func (h hold) giveBackNow() {
	if h.free != nil {
		h.free()
	}
}

// saveOutcome records an attempt's outcome. Another executor given the
// same dispatch (a redelivery while this one still ran it, as after a NATS
// node is lost) may have re-attached to the same attempt meanwhile, writing
// its record again as running: both wait for the one command on the host
// and read its one exit status, so the outcome is written over that
// record. A record that moved on otherwise (done, another attempt or
// generation) is left as it is: ErrChanged, and the node is decided again
// from it.
func (nr *nodeRun) saveOutcome(ctx context.Context, rec Record) error {
	changed := nr.save(ctx, rec)
	if !errors.Is(changed, events.ErrChanged) {
		return changed
	}
	n, err := nr.x.Records.Update(ctx, nr.key, func(cur *Record) error {
		if cur.Status != dag.NodeRunning || cur.Generation != rec.Generation || cur.Attempt != rec.Attempt {
			return changed // moved on: left as it is
		}
		*cur = rec
		return nil
	})
	if errors.Is(err, events.ErrBadRecord) {
		return changed // damaged since: decided again from it
	}
	if err != nil {
		return err
	}
	nr.rec, nr.rev, nr.known = rec, n, true
	return nil
}

func (nr *nodeRun) emit(ctx context.Context, ev *events.NodeEvent, attempt int) {
	nr.emitNode(ctx, nr.j, ev, attempt)
}

// runningAgain publishes again the running of the attempt rec records
// (one made in rec's generation), as the delivery that made the attempt
// published it when the attempt started: the same message id, attempt,
// generation and start. It comes before that attempt's end, which a
// delivery finds recorded (a redelivery, a re-attach after a crash, a
// settle of an attempt left running): the first copy may never have been
// stored (its publish was lost, and the delivery that made it did not
// flush it before it died or gave the dispatch back), and a node must not
// end in the stream without having run there. The first copy, when it
// was stored, drops this one: within the event stream's duplicate window
// JetStream drops it; later, a delivery that follows an earlier one of
// its dispatch looks for what it emits first (Recheck). An attempt of an
// earlier generation (a settle) was announced before this delivery's
// dispatch was published, so it is looked for from its recorded start
// on, and not announced again when its record holds none (written
// before records kept it): it could not be looked for.
func (nr *nodeRun) runningAgain(ctx context.Context, rec Record) {
	if rec.Attempt <= 0 || rec.GenAttempts <= 0 || rec.Generation > nr.d.Generation {
		return // no attempt made in its generation (skipped without running)
	}
	ref := nr.d.Ref
	ref.Generation = rec.Generation
	ev := &events.NodeEvent{Status: dag.NodeRunning, GenAttempt: rec.GenAttempts, SpecHash: rec.SpecHash, Run: events.Run{StartedAt: rec.StartedAt}}
	if rec.Generation == nr.d.Generation {
		nr.emitNodeOf(ctx, ref, nr.j, ev, rec.Attempt)
		return
	}
	if rec.StartedAt == nil {
		return
	}
	nr.emitLookedFor(ctx, *rec.StartedAt, ref, nr.j, ev, rec.Attempt)
}
