package events

import (
	"errors"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Concurrency limits across executors (gantry_slots) and executors by zone.

// BucketSlots holds one key per slot of a limit in use and one per node
// waiting for a slot; only executors read and write it. Keys:
//
//	slot.<limit-id>.<index>                          value: SlotHolder
//	wait.<limit-id>.<100-priority>.<unix-nanos>.<id>  value: SlotHolder
//
// Every key lives SlotTTL unless its holder writes it again (every
// SlotTTL/3 while the node runs or waits), so the slots of an executor
// that died free themselves.
const BucketSlots = "gantry_slots"

// SlotTTL is how long a slot or wait key outlives its holder's last
// refresh.
const SlotTTL = 15 * time.Second

// SlotHolder is the value of a slot or wait key: who holds it, for which
// node attempt.
type SlotHolder struct {
	Executor string `json:"executor"` // the executor instance
	Attempt  string `json:"attempt"`  // <workflow_id>.<generation>.<formula>.<node>.<attempt>
	Priority int    `json:"priority"`
}

// Takers is what the durable consumer of a zone's dispatches
// (ExecutorDurable) says about the executors that take the zone's work.
type Takers struct {
	Zone     string // "" for hosts without a zone
	Consumer string
	// Exists: an executor of the zone has started at some time (executors
	// create their zone's durable; nothing else does).
	Exists bool
	// Pulling counts the pull requests waiting on it: executors of the
	// zone asking for work now. InHand counts the dispatches delivered
	// to them and not yet acknowledged; Queued, those not delivered yet.
	Pulling int
	InHand  int
	Queued  uint64
}

// Nobody says that no executor takes the zone's work now: none ever
// started (no consumer), or none asks for work and none holds any (they
// are gone: a dead executor's pull requests expire within seconds, and
// what it held goes back to the queue after eventbus.WorkAckWait).
func (t Takers) Nobody() bool { return !t.Exists || (t.Pulling == 0 && t.InHand == 0) }

// Why says, for people, why the zone's work is not taken.
func (t Takers) Why() string {
	who := "zone " + t.Zone
	if t.Zone == "" {
		who = "hosts without a zone"
	}
	switch {
	case !t.Exists:
		if t.Zone == "" {
			return "no executor serves hosts without a zone (start one without --labels)"
		}
		return "no executor serves zone " + t.Zone + " (start one with --labels " + dag.ZoneLabel + "=" + t.Zone + ")"
	case t.Nobody():
		return "no executor of " + who + " is running: none asks for work"
	}
	return fmt.Sprintf("the executors of %s are busy: they hold %d dispatch(es), %d more are queued", who, t.InHand, t.Queued)
}

// validLimits checks a dispatch's limits and priority.
func validLimits(ls []dag.SlotLimit, priority int) error {
	var errs []error
	for i, l := range ls {
		if !slotID(l.ID) {
			errs = append(errs, fmt.Errorf("limits[%d].id %q is not [a-z0-9-]+", i, l.ID))
		}
		if l.MaxParallel < 0 || l.MaxParallel > dag.MaxLimit {
			errs = append(errs, fmt.Errorf("limits[%d].max_parallel %d is out of range 0-%d", i, l.MaxParallel, dag.MaxLimit))
		}
	}
	if priority != 0 && (priority < dag.MinPriority || priority > dag.MaxPriority) {
		errs = append(errs, fmt.Errorf("priority %d is out of range %d-%d", priority, dag.MinPriority, dag.MaxPriority))
	}
	return errors.Join(errs...)
}

func slotID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
