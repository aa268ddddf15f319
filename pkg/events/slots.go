package events

import (
	"errors"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/nats-io/nats.go/jetstream"
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

// ExecutorConsumer is the durable consumer of the executors of a zone on
// GANTRY_DISPATCH ("" for executors started without one): ConsumerExecutor,
// or executor-zone-<zone>. Their filters do not overlap, as a work queue
// needs: zoned work goes only to its zone's executors.
func ExecutorConsumer(zone string) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:        ConsumerExecutor,
		Description:    "executors: run dispatched formulas of hosts without a zone",
		FilterSubjects: []string{ZoneDispatch("")},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        WorkAckWait,
		MaxDeliver:     MaxDeliverWork,
		MaxAckPending:  ExecutorMaxAcks,
	}
	if zone != "" {
		cfg.Durable = ConsumerExecutor + "-zone-" + zone
		cfg.Description = "executors of zone " + zone + ": run dispatched formulas of its hosts"
		cfg.FilterSubjects = []string{ZoneDispatch(zone)}
	}
	return cfg
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
