package formula

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
)

// hold is the slots an attempt holds: a lease of slots across executors,
// or (lease nil) a slot of this executor's own per-host capacity.
type hold struct {
	lease  *slots.Lease
	free   func() // gives them back
	waited bool   // the attempt waited for them (announced: waitingForSlot)
}

// takeSlots waits until the attempt may start: a slot of each of the
// dispatch's limits across executors (Executor.Slots), or, without a
// slots manager, of this executor's own per-host capacity. A lease handed
// over by the formula's node that ended last is kept when nobody waits for
// its slots ahead of this attempt (slots.Lease.Keep), else given back
// first. A wait for a limit is announced as a node event. It returns the
// slots, or an error (nr.stop's when the node was cancelled while waiting).
func (nr *nodeRun) takeSlots(attempt int) (hold, error) {
	stopping := nr.x.stopping()
	if nr.x.Slots == nil {
		select {
		case nr.slot <- struct{}{}:
			return hold{free: func() { <-nr.slot }}, nil
		case <-nr.stop.Done():
			return hold{}, nr.stop.Err()
		case <-stopping:
			return hold{}, fmt.Errorf("%w: it waited for a slot", ErrStopping)
		}
	}
	if l := nr.handed; l != nil {
		nr.handed = nil
		if nr.stop.Err() == nil && l.Keep() {
			return hold{lease: l, free: l.Release}, nil
		}
		l.Release()
	}
	d := nr.d
	limits := d.Limits
	if len(limits) == 0 { // a planner that sends none: the host's own limit
		limits = []dag.SlotLimit{{ID: "n-" + strings.ReplaceAll(dag.HostToken(d.Ref.Host), "_", "-"), Name: "host " + d.Ref.Host}}
	}
	var waited atomic.Bool
	req := slots.Request{
		Limits:   limits,
		Priority: d.Priority,
		Attempt:  strings.Join([]string{d.WorkflowID, strconv.Itoa(d.Generation), d.Formula, nr.n.Name, strconv.Itoa(attempt)}, "."),
		Waiting: func(l dag.SlotLimit, running int) {
			waited.Store(true)
			nr.waitingForSlot(attempt, l, running)
		},
	}
	// The slots bucket may not answer for a while (a NATS node lost, its
	// leaders being elected): that is gantry's trouble, not the node's, so
	// the attempt waits and tries again rather than fail.
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, SlotRetryFor
	bo.Reset()
	actx, cancel := context.WithCancel(nr.stop)
	defer cancel()
	if nr.x.Stopping != nil {
		defer context.AfterFunc(nr.x.Stopping, cancel)()
	}
	for {
		lease, err := nr.x.Slots.Acquire(actx, req)
		if err == nil {
			return hold{lease: lease, free: lease.Release, waited: waited.Load()}, nil
		}
		if nr.stop.Err() != nil {
			return hold{}, nr.stop.Err()
		}
		if actx.Err() != nil {
			return hold{}, fmt.Errorf("%w: it waited for a slot", ErrStopping)
		}
		wait := bo.NextBackOff()
		if wait == backoff.Stop {
			return hold{}, fmt.Errorf("%w: cannot take a slot for %s: %w", ErrBus, SlotRetryFor, err)
		}
		nr.log.Warn("cannot take a slot yet; trying again", "attempt", attempt, "err", err, "retry_in", wait)
		select {
		case <-nr.stop.Done():
			return hold{}, nr.stop.Err()
		case <-stopping:
			return hold{}, fmt.Errorf("%w: it waited for a slot", ErrStopping)
		case <-time.After(wait):
		}
	}
}

// ErrStopping: the executor is stopping, and the attempt had started
// nothing (it waited for slots, for an SSH session, or between attempts);
// the dispatch is delivered again, and the attempt does not count.
var ErrStopping = errors.New("nothing more started: the executor is stopping")

// stopping is done once the executor stops (nil, never, without Stopping).
func (x *Executor) stopping() <-chan struct{} {
	if x.Stopping == nil {
		return nil
	}
	return x.Stopping.Done()
}

// heldByPause gives the slots h back while the workflow is paused, and
// takes them again once it goes on: an attempt that waited for its slots
// may get them after a pause, which holds every node not started yet. (A
// formula looks for a pause before it starts nodes; this attempt had
// started waiting before.) A run state that cannot be read holds nothing,
// as there.
func (nr *nodeRun) heldByPause(attempt int, h hold) (hold, error) {
	for {
		resumed, done := nr.x.awaitResume(nr.d.WorkflowID) // before the read: a resume after it wakes us
		w, _, err := nr.x.Runs.Get(nr.stop, nr.d.WorkflowID)
		if err != nil || w.Generation != nr.d.Generation || w.Status != dag.WorkflowPaused {
			done()
			return h, nil
		}
		h.giveBackNow()
		nr.log.Info("slots came while the workflow is paused: given back until it goes on")
		t := time.NewTimer(PausePoll)
		select {
		case <-resumed:
		case <-t.C:
		case <-nr.stop.Done():
		case <-nr.x.stopping():
		}
		t.Stop()
		done()
		if nr.stop.Err() != nil {
			return hold{}, nr.stop.Err()
		}
		if h, err = nr.takeSlots(attempt); err != nil {
			return hold{}, err
		}
	}
}

// SlotRetryFor is how long an attempt tries to take its slots while the
// slots bucket fails, before the dispatch is given back for redelivery
// (the attempt not counted).
var SlotRetryFor = 2 * time.Minute

// ErrBus: the bus failed before anything started on the host; the
// dispatch is delivered again and the attempt does not count.
var ErrBus = errors.New("nothing ran: the bus did not answer")

// waitingForSlot announces that the attempt waits for a slot of limit l.
func (nr *nodeRun) waitingForSlot(attempt int, l dag.SlotLimit, running int) {
	nr.log.Info("waiting for a slot", "limit", l.Name, "running", running, "attempt", attempt)
	ev := &events.NodeEvent{Status: dag.NodeRunning, Reason: fmt.Sprintf("waiting for a slot of limit %s (%d running)", l.Name, running), NotStarted: true}
	n := nr.d.Nodes[nr.j]
	ev.Ref, ev.Node, ev.Attempt, ev.SpecHash, ev.MaxAttempts, ev.Actor = nr.d.Ref, n.Name, attempt, n.SpecHash, n.Retry.MaxAttempts, nr.x.Actor
	nr.out.Emit(context.Background(), events.HostLifecycle(nr.d.Ref.Host), ev, msgID(nr.d.Ref, n.Name, "running-slot-"+l.ID, attempt))
}
