// Package nodemetrics counts nodes by their final state:
// gantry_node_results_total{status, operation}. Each node is counted once,
// by the process that decided its end: the executor for the nodes it ran
// (succeeded, failed, skipped, and blocked or cancelled inside a formula),
// the planner for the nodes of a formula it blocked or cancelled before
// dispatching it (no executor ever sees those). The sum across processes
// is every node's end; the operation label keeps check runs (which change
// nothing) and deletes apart from creates.
package nodemetrics

import (
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Name is the counter's name.
const Name = "gantry_node_results_total"

var results = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: Name,
	Help: "Nodes that reached their final state in a formula run, by that state (succeeded, failed, skipped, blocked, cancelled) and the run's operation (create, delete, check); counted by the executor that ran them, or by the planner for the nodes of a formula it blocked or cancelled before dispatch.",
}, []string{"status", "operation"})

// Statuses are the final states counted.
var Statuses = []dag.NodeState{dag.NodeSucceeded, dag.NodeFailed, dag.NodeSkipped, dag.NodeBlocked, dag.NodeCancelled}

// Operations are the operations counted.
var Operations = []dag.Operation{dag.OpCreate, dag.OpDelete, dag.OpCheck}

func init() { // every series from 0, so rates and alerts see it before it first happens
	for _, st := range Statuses {
		for _, op := range Operations {
			results.WithLabelValues(string(st), string(op))
		}
	}
}

// Count counts a node that ended in state st in a run of operation op; a
// state that is not final is not counted.
func Count(st dag.NodeState, op dag.Operation) {
	if st.Terminal() {
		results.WithLabelValues(string(st), string(op)).Inc()
	}
}
