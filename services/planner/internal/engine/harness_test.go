package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// harness is an engine on in-memory ports.
type harness struct {
	t         *testing.T
	e         *Engine
	workflows *eventbustest.MemoryBucket[Record]
	runs      *eventbustest.MemoryBucket[Snapshot]
	nodes     *eventbustest.MemoryBucket[events.NodeRecord]
	// hosts is the state-store's per-host projection (gantry_state): what
	// a test writes there as a thief of the state-store's credential
	// would; the engine is not given it.
	hosts *eventbustest.MemoryBucket[events.HostNode]
	out   *eventbustest.MemoryOutbox
	// errors shows a formula event's error in stored's lines.
	errors bool
	seen   int    // events stored before the current step
	seq    uint64 // stream sequence of the events handled
	id     string // the workflow submitted last
}

var operator = events.Principal{Name: "operator", Attested: true}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, workflows: &eventbustest.MemoryBucket[Record]{}, runs: &eventbustest.MemoryBucket[Snapshot]{},
		nodes: &eventbustest.MemoryBucket[events.NodeRecord]{}, hosts: &eventbustest.MemoryBucket[events.HostNode]{}, out: &eventbustest.MemoryOutbox{}}
	h.e = &Engine{Workflows: h.workflows, Runs: h.runs, Nodes: h.nodes, Out: h.out, WorkflowRevs: h.workflows, RunRevs: h.runs,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return time.Unix(1_800_000_000, 0) }}
	return h
}

// fresh is the engine after a restart: the same stores, nothing in memory.
func (h *harness) fresh() {
	old := h.e
	h.e = &Engine{Workflows: old.Workflows, Runs: old.Runs, Nodes: old.Nodes, Out: old.Out, Log: old.Log, Now: old.Now,
		WorkflowRevs: old.WorkflowRevs, RunRevs: old.RunRevs}
}

func (h *harness) submit(yaml string) error {
	reply, err := h.e.Submit(context.Background(), []byte(yaml), false, operator)
	if err != nil {
		return err
	}
	if reply.Status != "accepted" {
		return fmt.Errorf("submit: %s %v", reply.Status, reply.Errors)
	}
	h.id = reply.WorkflowID
	return h.e.Start(context.Background(), h.id)
}

func (h *harness) handle(pl events.Payload) error {
	return h.e.Handle(context.Background(), h.event(pl))
}

// event is pl as the consumer delivers it.
func (h *harness) event(pl events.Payload) *consume.Event {
	env, err := events.NewAt(fmt.Sprint("ev-", h.seq), "test", time.Unix(1_800_000_000, 0), pl)
	if err != nil {
		h.t.Fatal(err)
	}
	h.seq++
	return &consume.Event{Envelope: env, Stream: h.seq, Delivered: 1}
}

func (h *harness) ref(formula string, gen int) events.Ref {
	return events.Ref{WorkflowID: h.id, Workflow: "w", Operation: dag.OpCreate, Formula: formula, Host: "h1", Generation: gen}
}

// formula reports a formula transition as the executor does.
func (h *harness) formula(f string, gen int, st dag.FormulaState) error {
	return h.handle(&events.FormulaEvent{Ref: h.ref(f, gen), Status: st})
}

// health reports a health gate's final verdict.
func (h *harness) health(f string, gen int, pass bool) error {
	st := events.HealthFail
	if pass {
		st = events.HealthPass
	}
	ev := &events.HealthEvent{Ref: h.ref(f, gen), Status: st, Final: true, Retries: 3, Run: events.Run{Attempt: 1}}
	if !pass { // as the health-gate says a gate failed
		ev.Attempt, ev.OutputTail, ev.Error = 3, "starting\npg_isready: no response\n", "failed 3 of 3 checks; last: exit status 2"
	}
	return h.handle(ev)
}

func (h *harness) control(verb string) error {
	_, err := h.e.Control(context.Background(), h.id, verb, operator)
	return err
}

// recordNode records a node's outcome as the executor does.
func (h *harness) recordNode(op dag.Operation, formula, node string, st dag.NodeState) {
	h.nodes.Set(events.NodeKey(h.id, op, formula, node), events.NodeRecord{Status: st, Attempt: 1, Generation: 1, GenAttempts: 1})
}

// stored describes the events stored since the last call, one line each.
func (h *harness) stored() []string {
	all := h.out.Stored()
	var out []string
	for _, e := range all[h.seen:] {
		line := describe(e)
		if f, ok := e.Payload.(*events.FormulaEvent); ok && h.errors && f.Error != "" {
			line += ": " + f.Error
		}
		if w, ok := e.Payload.(*events.WorkflowEvent); ok && len(w.Stopping) > 0 {
			line += " [stopping " + strings.Join(w.Stopping, ", ") + "]"
		}
		out = append(out, line)
	}
	h.seen = len(all)
	return out
}

func describe(e eventbustest.Emitted) string {
	switch p := e.Payload.(type) {
	case *events.WorkflowEvent:
		if p.Reason != "" {
			return "workflow " + string(p.Status) + ": " + p.Reason
		}
		return "workflow " + string(p.Status)
	case *events.FormulaEvent:
		if p.Blocker != "" {
			return fmt.Sprintf("%s %s (%s)", p.Formula, p.Status, p.Blocker)
		}
		return fmt.Sprintf("%s %s", p.Formula, p.Status)
	case *events.NodeEvent:
		if p.Reason != "" {
			return fmt.Sprintf("%s/%s %s: %s", p.Formula, p.Node, p.Status, p.Reason)
		}
		return fmt.Sprintf("%s/%s %s", p.Formula, p.Node, p.Status)
	case *events.Dispatch:
		var done []string
		for _, n := range p.Nodes {
			if n.AlreadyDone {
				done = append(done, n.Name)
			}
		}
		s := fmt.Sprintf("dispatch %s %s g%d", p.Formula, p.Operation, p.Generation)
		if len(done) > 0 {
			s += " skip " + strings.Join(done, ",")
		}
		var held []string
		for _, n := range p.Nodes {
			if n.NotRetried {
				held = append(held, n.Name)
			}
		}
		if len(held) > 0 {
			s += " hold " + strings.Join(held, ",")
		}
		return s
	case *events.GateRequest:
		return "gate " + p.Formula
	}
	return fmt.Sprintf("%T", e.Payload)
}

// status is the workflow's recorded status.
func (h *harness) status() dag.WorkflowState {
	rec, _, err := h.workflows.Get(context.Background(), h.id)
	if err != nil {
		h.t.Fatal(err)
	}
	return rec.Status
}

// snapshot is the run's recorded formula states, one letter each.
func (h *harness) snapshot() string {
	snap, _, err := h.runs.Get(context.Background(), h.id)
	if err != nil {
		h.t.Fatal(err)
	}
	return snap.Formulas
}
