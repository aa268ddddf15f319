package formula

import (
	"sort"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/nodemetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	nodeDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gantry_node_duration_seconds",
		Help:    "Time from a node's turn to its final status (every attempt and the backoff between them), by that status.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
	}, []string{"status"})
	nodesRunning = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "gantry_nodes_running",
		Help: "Nodes running in this process's executors.",
	})
)

// countNodes counts the final states of a formula run's nodes, in a run
// of operation op (gantry_node_results_total).
func countNodes(states []dag.NodeState, op dag.Operation) {
	for _, st := range states {
		nodemetrics.Count(st, op)
	}
}

// inFlight is a node being run, for Status.
type inFlight struct {
	events.RunningNode
}

// nodeStarted notes that a node runs until the returned func is called,
// which also observes its duration with its final state.
func (x *Executor) nodeStarted(d *events.Dispatch, node string) func(dag.NodeState) {
	r := &inFlight{events.RunningNode{WorkflowID: d.WorkflowID, Formula: d.Formula, Host: d.Ref.Host, Node: node, Since: time.Now().UTC()}}
	x.mu.Lock()
	if x.nodes == nil {
		x.nodes = map[*inFlight]struct{}{}
	}
	x.nodes[r] = struct{}{}
	x.mu.Unlock()
	nodesRunning.Inc()
	return func(st dag.NodeState) {
		x.mu.Lock()
		delete(x.nodes, r)
		x.mu.Unlock()
		nodesRunning.Dec()
		nodeDuration.WithLabelValues(string(st)).Observe(time.Since(r.Since).Seconds())
	}
}

// Status is what this executor runs: its formulas and nodes in flight,
// the nodes listed oldest first (at most events.MaxStatusItems).
func (x *Executor) Status() (formulas int, nodes []events.RunningNode, total int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, cs := range x.running {
		formulas += len(cs)
	}
	nodes = []events.RunningNode{}
	for r := range x.nodes {
		nodes = append(nodes, r.RunningNode)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Since.Before(nodes[j].Since) })
	total = len(nodes)
	if len(nodes) > events.MaxStatusItems {
		nodes = nodes[:events.MaxStatusItems]
	}
	return formulas, nodes, total
}
