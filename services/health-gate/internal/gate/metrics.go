package gate

import (
	"sort"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	gateResults = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_gate_results_total",
		Help: "Health gates given a verdict, by verdict (pass, fail).",
	}, []string{"status"})
	gateDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gantry_gate_duration_seconds",
		Help:    "Time from a gate's first check to its verdict, by verdict.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
	}, []string{"status"})
	gatesInProgress = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "gantry_gates_in_progress",
		Help: "Health gates being checked in this process.",
	})
)

func init() { // both verdicts from 0
	for _, st := range []events.HealthStatus{events.HealthPass, events.HealthFail} {
		gateResults.WithLabelValues(string(st))
	}
}

type inProgress struct{ events.GateInProgress }

// begin notes a gate being checked until the returned func is called.
func (c *Checker) begin(g *events.GateRequest) func() {
	p := &inProgress{events.GateInProgress{WorkflowID: g.WorkflowID, Formula: g.Formula, Host: g.Ref.Host, Since: time.Now().UTC()}}
	c.mu.Lock()
	if c.gates == nil {
		c.gates = map[*inProgress]struct{}{}
	}
	c.gates[p] = struct{}{}
	c.mu.Unlock()
	gatesInProgress.Inc()
	return func() {
		c.mu.Lock()
		delete(c.gates, p)
		c.mu.Unlock()
		gatesInProgress.Dec()
	}
}

// verdict counts a gate's verdict.
func verdict(ev *events.HealthEvent, took time.Duration) {
	gateResults.WithLabelValues(string(ev.Status)).Inc()
	gateDuration.WithLabelValues(string(ev.Status)).Observe(took.Seconds())
}

// Status is the gates being checked, oldest first (at most
// events.MaxStatusItems), and how many.
func (c *Checker) Status() ([]events.GateInProgress, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gates := []events.GateInProgress{}
	for p := range c.gates {
		gates = append(gates, p.GateInProgress)
	}
	sort.Slice(gates, func(i, j int) bool { return gates[i].Since.Before(gates[j].Since) })
	n := len(gates)
	if n > events.MaxStatusItems {
		gates = gates[:events.MaxStatusItems]
	}
	return gates, n
}
