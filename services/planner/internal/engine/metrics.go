package engine

import (
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/nodemetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// workflowResults counts workflows by how they ended, once the planner
// has stored their end.
var workflowResults = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gantry_workflow_results_total",
	Help: "Workflows ended, by outcome (succeeded, failed, cancelled).",
}, []string{"status"})

// workflowsActive is the number of workflows this planner is stepping.
var workflowsActive = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "gantry_workflows_active",
	Help: "Workflows accepted or running (or paused) that this planner instance has stepped and that have not ended.",
})

// recordsIgnored counts records the planner could not decode while
// deciding what a submission skips as already done: each is ignored (the
// nodes it could have decided run) and logged.
var recordsIgnored = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gantry_planner_records_ignored_total",
	Help: "Records that did not decode, ignored when deciding what a submission skips as already done (the nodes run), by bucket.",
}, []string{"bucket"})

func init() { // every outcome from 0
	for _, st := range []dag.WorkflowState{dag.WorkflowSucceeded, dag.WorkflowFailed, dag.WorkflowCancelled} {
		workflowResults.WithLabelValues(string(st))
	}
	for _, b := range []string{events.BucketNodes, events.BucketWorkflows} {
		recordsIgnored.WithLabelValues(b)
	}
}

// ignored reports a record of bucket left out of planning.
func (e *Engine) ignored(bucket, msg string, args ...any) {
	recordsIgnored.WithLabelValues(bucket).Inc()
	e.Log.Warn(msg, append(args, "bucket", bucket)...)
}

// settled notes, after a unit of work is stored, which of its runs are
// active and which ended.
func (e *Engine) settled(r *run) {
	if e.active == nil {
		e.active = map[string]bool{}
	}
	if r.rec.Status.Terminal() {
		delete(e.active, r.rec.ID)
	} else {
		e.active[r.rec.ID] = true
	}
	e.activeN.Store(int64(len(e.active)))
	workflowsActive.Set(float64(len(e.active)))
}

// countEnded counts the workflow ends and the nodes it stopped before
// dispatch that a stored unit of work published.
func (e *Engine) countEnded() {
	for _, st := range e.ended {
		workflowResults.WithLabelValues(string(st)).Inc()
	}
	for _, n := range e.stoppedNodes {
		nodemetrics.Count(n.status, n.operation)
	}
	e.ended, e.stoppedNodes = nil, nil
}

// stoppedNode is a node the planner ended (blocked or cancelled) without
// dispatching its formula, counted once its unit of work is stored.
type stoppedNode struct {
	status    dag.NodeState
	operation dag.Operation
}

// nodesStopped notes n nodes of a run that the planner ended in state st.
func (e *Engine) nodesStopped(r *run, st dag.NodeState, n int) {
	for range n {
		e.stoppedNodes = append(e.stoppedNodes, stoppedNode{st, r.rec.Operation})
	}
}

// Active is the number of workflows not ended that this engine has
// stepped since it started (its status in `nats micro stats`).
func (e *Engine) Active() int { return int(e.activeN.Load()) }
