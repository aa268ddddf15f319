package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// runResult is one run of a workflow.
type runResult struct {
	ID        string
	Start     time.Time // when it was submitted
	Wall      time.Duration
	Status    dag.WorkflowState
	Latencies []time.Duration // ready -> running, per node
	Busy      float64         // the machine's cores busy on average, submission to end
}

// runWorkflow submits a composition and waits for its end; latencies
// reads its events back after.
func runWorkflow(cl *client.Client, c *dag.Composition, timeout time.Duration) (*runResult, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	done := make(chan dag.WorkflowState, 16)
	var id string
	idSet := make(chan struct{})
	sub, err := cl.Conn().Subscribe(events.AllWorkflowLifecycle, func(m *nats.Msg) {
		<-idSet
		env, err := events.Parse(m.Data)
		if err != nil || !strings.HasPrefix(env.Subject, id) {
			return
		}
		if st := dag.WorkflowState(env.Type.What()); st.Terminal() {
			done <- st
		}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	cpu := readMachineCPU()
	start := time.Now()
	reply, err := cl.Submit(context.Background(), body, nil)
	if se := (*client.ServiceError)(nil); errors.As(err, &se) {
		close(idSet)
		return nil, fmt.Errorf("submit rejected: %s: %s", se.Description, se.Body)
	}
	if err != nil {
		close(idSet)
		return nil, fmt.Errorf("submit: %w", err)
	}
	if reply.WorkflowID == "" {
		close(idSet)
		return nil, fmt.Errorf("submit reply: no workflow id")
	}
	id = reply.WorkflowID
	close(idSet)
	var st dag.WorkflowState
	select {
	case st = <-done:
	case <-time.After(timeout):
		return nil, fmt.Errorf("workflow %s did not end within %s", id, timeout)
	}
	wall := time.Since(start)
	return &runResult{ID: id, Start: start, Wall: wall, Status: st, Busy: cpu.coresBusy()}, nil
}

// latencies: for each node, from the moment it could start (its formula
// dispatched and its dependencies succeeded) to its running event.
func latencies(nc *nats.Conn, r *runResult, c *dag.Composition) ([]time.Duration, error) {
	id := r.ID
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.AllHostLifecycle}})
	if err != nil {
		return nil, err
	}
	fRunning := map[string]time.Time{}  // formula -> running
	fDone := map[string]time.Time{}     // formula -> succeeded
	ready := map[string]time.Time{}     // formula -> ready
	succeeded := map[string]time.Time{} // formula/node -> succeeded
	running := map[string]time.Time{}   // formula/node -> first running
	for {
		batch, err := cons.FetchNoWait(2000)
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			env, err := events.Parse(m.Data())
			if err != nil || !strings.HasPrefix(env.Subject, id) {
				continue
			}
			var d struct {
				Formula string `json:"formula"`
				Node    string `json:"node"`
			}
			json.Unmarshal(env.Data, &d)
			key := d.Formula + "/" + d.Node
			switch env.Type {
			case events.FormulaType(dag.FormulaReady):
				ready[d.Formula] = env.Time
			case events.FormulaType(dag.FormulaRunning):
				fRunning[d.Formula] = env.Time
			case events.FormulaType(dag.FormulaSucceeded):
				fDone[d.Formula] = env.Time
			case events.NodeType(dag.NodeRunning):
				if _, seen := running[key]; !seen {
					running[key] = env.Time
				}
			case events.NodeType(dag.NodeSucceeded):
				succeeded[key] = env.Time
			}
		}
		if n == 0 {
			break
		}
	}
	breakdown(c, ready, fRunning, running, succeeded, fDone)
	ends(r, ready, fDone)
	var out []time.Duration
	for _, f := range c.Formulas {
		for _, n := range f.Nodes {
			r, ok := running[f.ID+"/"+n.Name]
			if !ok {
				continue
			}
			from := ready[f.ID]
			for _, d := range n.DependsOn {
				if t := succeeded[f.ID+"/"+d]; t.After(from) {
					from = t
				}
			}
			if !from.IsZero() {
				out = append(out, r.Sub(from))
			}
		}
	}
	return out, nil
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(p * float64(len(s)-1))
	return s[k]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minMax(xs []float64) (float64, float64) {
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// lastBreakdown holds the median time of each segment of a one-node
// formula's life, for the chain: where a link's time goes.
var lastBreakdown map[string]float64

func breakdown(c *dag.Composition, ready, fRunning, nRunning, nDone, fDone map[string]time.Time) {
	segs := map[string][]float64{}
	add := func(name string, a, b time.Time) {
		if !a.IsZero() && !b.IsZero() {
			segs[name] = append(segs[name], float64(b.Sub(a).Microseconds())/1000)
		}
	}
	if len(c.Formulas) > 0 && len(c.Formulas[0].Nodes) > 1 {
		// formulas of nodes run one after another (ssh-500): where a
		// node's time goes
		for _, f := range c.Formulas {
			first, last := f.ID+"/"+f.Nodes[0].Name, f.ID+"/"+f.Nodes[len(f.Nodes)-1].Name
			add("0 ready->formula running", ready[f.ID], fRunning[f.ID])
			add("0 formula running->first node running", fRunning[f.ID], nRunning[first])
			add("c last node succeeded->formula succeeded", nDone[last], fDone[f.ID])
			for j, n := range f.Nodes {
				k := f.ID + "/" + n.Name
				add("a node running->node succeeded", nRunning[k], nDone[k])
				if j+1 < len(f.Nodes) {
					add("b node succeeded->next node running", nDone[k], nRunning[f.ID+"/"+f.Nodes[j+1].Name])
				}
			}
		}
	}
	for i, f := range c.Formulas {
		if len(f.Nodes) != 1 {
			break
		}
		k := f.ID + "/" + f.Nodes[0].Name
		add("1 ready->formula running", ready[f.ID], fRunning[f.ID])
		add("2 formula running->node running", fRunning[f.ID], nRunning[k])
		add("3 node running->node succeeded", nRunning[k], nDone[k])
		add("4 node succeeded->formula succeeded", nDone[k], fDone[f.ID])
		if i+1 < len(c.Formulas) {
			add("5 formula succeeded->next ready", fDone[f.ID], ready[c.Formulas[i+1].ID])
		}
	}
	lastBreakdown = map[string]float64{}
	for k, v := range segs {
		lastBreakdown[k] = median(v)
	}
}

// ends adds to lastBreakdown the time from the submission to the first
// formula ready, and from the last formula's end to the workflow's (as
// the submitter saw it): what a run costs besides its nodes.
func ends(r *runResult, ready, fDone map[string]time.Time) {
	var first, last time.Time
	for _, t := range ready {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	for _, t := range fDone {
		if t.After(last) {
			last = t
		}
	}
	if !first.IsZero() {
		lastBreakdown["s submit->first formula ready"] = float64(first.Sub(r.Start).Microseconds()) / 1000
	}
	if !last.IsZero() {
		lastBreakdown["e last formula succeeded->workflow end seen"] = float64(r.Start.Add(r.Wall).Sub(last).Microseconds()) / 1000
	}
}
