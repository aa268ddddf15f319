package engine

import (
	"github.com/gantry-dev/gantry/pkg/dag"
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

func init() { // every outcome from 0
	for _, st := range []dag.WorkflowState{dag.WorkflowSucceeded, dag.WorkflowFailed, dag.WorkflowCancelled} {
		workflowResults.WithLabelValues(string(st))
	}
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

// countEnded counts the workflow ends a stored unit of work published.
func (e *Engine) countEnded() {
	for _, st := range e.ended {
		workflowResults.WithLabelValues(string(st)).Inc()
	}
	e.ended = nil
}

// Active is the number of workflows not ended that this engine has
// stepped since it started (its status in `nats micro stats`).
func (e *Engine) Active() int { return int(e.activeN.Load()) }
