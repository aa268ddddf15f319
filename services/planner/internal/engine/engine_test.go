package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// chain: a, then b after a completed. b has a delete, a has none.
const chain = `
name: chain
hosts: {h1: {transport: local}}
formulas:
  - id: a
    server: h1
    nodes: [{name: x, run: "true", delete: "rm x"}]
  - id: b
    server: h1
    depends_on: [{formula: a, condition: completed}]
    nodes: [{name: y, run: "true", delete: "rm y"}]
`

// gated: b waits for a's health gate.
const gated = `
name: gated
hosts: {h1: {transport: local}}
formulas:
  - id: a
    server: h1
    nodes: [{name: x, run: "true"}]
    health_gate: {check: "true", timeout: 10s, retries: 2}
  - id: b
    server: h1
    depends_on: [{formula: a, condition: healthy}]
    nodes: [{name: y, run: "true"}]
`

// parallel: a and x start at once; y waits for x.
const parallel = `
name: parallel
hosts: {h1: {transport: local}}
formulas:
  - id: a
    server: h1
    nodes: [{name: aa, run: "true"}]
  - id: x
    server: h1
    nodes: [{name: xx, run: "true"}]
  - id: y
    server: h1
    depends_on: [{formula: x, condition: completed}]
    nodes: [{name: yy, run: "true"}]
`

// step is one thing that happens to a run, and what the engine must make
// of it: the events it stores, in order, and the recorded status after.
type step struct {
	do     func(h *harness) error
	want   []string
	status dag.WorkflowState
	err    error // the step's error must match (errors.Is)
}

func TestRunTransitions(t *testing.T) {
	t.Parallel()
	submit := func(c string) func(h *harness) error { return func(h *harness) error { return h.submit(c) } }
	formula := func(f string, gen int, st dag.FormulaState) func(h *harness) error {
		return func(h *harness) error { return h.formula(f, gen, st) }
	}
	health := func(f string, pass bool) func(h *harness) error {
		return func(h *harness) error { return h.health(f, 1, pass) }
	}
	control := func(verb string) func(h *harness) error { return func(h *harness) error { return h.control(verb) } }
	cases := map[string][]step{
		"dispatch in dependency order, then succeed": {
			{do: submit(chain), want: []string{"workflow accepted", "workflow running", "a ready", "dispatch a create g1"}, status: dag.WorkflowRunning},
			{do: formula("a", 1, dag.FormulaRunning), want: nil, status: dag.WorkflowRunning},
			{do: formula("a", 1, dag.FormulaSucceeded), want: []string{"b ready", "dispatch b create g1"}, status: dag.WorkflowRunning},
			{do: formula("b", 1, dag.FormulaSucceeded), want: []string{"workflow succeeded"}, status: dag.WorkflowSucceeded},
		},
		"a failure blocks what depends on it": {
			{do: submit(chain), want: []string{"workflow accepted", "workflow running", "a ready", "dispatch a create g1"}},
			{do: formula("a", 1, dag.FormulaFailed), want: []string{"b/y blocked", "b blocked (a)", "workflow failed: formula a failed"}, status: dag.WorkflowFailed},
		},
		"a health gate holds dependents until it passes": {
			{do: submit(gated), want: []string{"workflow accepted", "workflow running", "a ready", "dispatch a create g1"}},
			{do: formula("a", 1, dag.FormulaSucceeded), want: []string{"a gating", "gate a"}, status: dag.WorkflowRunning},
			{do: health("a", true), want: []string{"a healthy", "b ready", "dispatch b create g1"}},
			{do: formula("b", 1, dag.FormulaSucceeded), want: []string{"workflow succeeded"}, status: dag.WorkflowSucceeded},
		},
		"an unhealthy gate blocks dependents": {
			{do: submit(gated)},
			{do: formula("a", 1, dag.FormulaSucceeded), want: []string{"a gating", "gate a"}},
			{do: health("a", false), want: []string{"a unhealthy", "b/y blocked", "b blocked (a)", "workflow failed: formula a: health gate failed after 3 checks: pg_isready: no response"}, status: dag.WorkflowFailed},
		},
		"a health verdict before its formula's success is asked again later, then applies": {
			// A planner asked for the gate, then died before it recorded
			// the run: the success comes again after the verdict.
			{do: submit(gated)},
			{do: health("a", true), want: nil, status: dag.WorkflowRunning, err: ErrEarlyVerdict},
			{do: formula("a", 1, dag.FormulaRunning), want: nil, status: dag.WorkflowRunning},
			{do: health("a", true), want: nil, status: dag.WorkflowRunning, err: ErrEarlyVerdict},
			{do: formula("a", 1, dag.FormulaSucceeded), want: []string{"a gating", "gate a"}, status: dag.WorkflowRunning},
			{do: health("a", true), want: []string{"a healthy", "b ready", "dispatch b create g1"}},
			{do: health("a", false), want: nil, status: dag.WorkflowRunning},
		},
		"cancel stops what has not started, waits for what runs, then ignores later events": {
			{do: submit(chain)},
			{do: control(events.VerbCancel), want: []string{"b/y cancelled: not started: the workflow was cancelled", "b cancelled",
				"workflow running: cancelling by request: stopping 1 running formula(s)"}, status: dag.WorkflowRunning},
			{do: control(events.VerbPause), err: ErrConflict, status: dag.WorkflowRunning},
			{do: formula("a", 1, dag.FormulaRunning), want: nil, status: dag.WorkflowRunning},
			{do: formula("a", 1, dag.FormulaCancelled), want: []string{"workflow cancelled: cancelled by request"}, status: dag.WorkflowCancelled},
			{do: formula("a", 1, dag.FormulaSucceeded), want: nil, status: dag.WorkflowCancelled},
			{do: control(events.VerbCancel), err: ErrConflict, status: dag.WorkflowCancelled},
			{do: control(events.VerbRetry), want: []string{"workflow running: retry: generation 2", "a ready", "dispatch a create g2"}, status: dag.WorkflowRunning},
			{do: formula("a", 2, dag.FormulaSucceeded), want: []string{"b ready", "dispatch b create g2"}, status: dag.WorkflowRunning},
		},
		"cancel with nothing running ends at once; a gate in progress is cancelled": {
			{do: submit(gated)},
			{do: formula("a", 1, dag.FormulaSucceeded), want: []string{"a gating", "gate a"}},
			{do: control(events.VerbCancel), want: []string{"a cancelled",
				"b/y cancelled: not started: the workflow was cancelled", "b cancelled", "workflow cancelled: cancelled by request"}, status: dag.WorkflowCancelled},
			{do: health("a", true), want: nil, status: dag.WorkflowCancelled},
		},
		"on_failure stop cancels what has not started, naming the failure": {
			{do: submit(parallel), want: []string{"workflow accepted", "workflow running", "a ready", "dispatch a create g1", "x ready", "dispatch x create g1"}},
			{do: formula("a", 1, dag.FormulaFailed), want: []string{"y/yy cancelled: not started: on_failure stop after a failed", "y cancelled (a)"}, status: dag.WorkflowRunning},
			{do: formula("x", 1, dag.FormulaSucceeded), want: []string{"workflow failed: formula a failed"}, status: dag.WorkflowFailed},
		},
		"pause holds new work, resume releases it as a new transition": {
			{do: submit(chain)},
			{do: control(events.VerbPause), want: []string{"workflow paused: " + PausedReason}, status: dag.WorkflowPaused},
			{do: formula("a", 1, dag.FormulaSucceeded), want: nil, status: dag.WorkflowPaused},
			{do: control(events.VerbResume), want: []string{"workflow running: resumed: nodes start again", "b ready", "dispatch b create g1"}, status: dag.WorkflowRunning},
			{do: control(events.VerbResume), err: ErrConflict, status: dag.WorkflowRunning},
			{do: formula("b", 1, dag.FormulaSucceeded), want: []string{"workflow succeeded"}, status: dag.WorkflowSucceeded},
		},
		"retry runs what failed as a new generation": {
			{do: submit(chain)},
			{do: control(events.VerbRetry), err: ErrConflict, status: dag.WorkflowRunning},
			{do: formula("a", 1, dag.FormulaFailed), want: []string{"b/y blocked", "b blocked (a)", "workflow failed: formula a failed"}},
			{do: control(events.VerbRetry), want: []string{"workflow running: retry: generation 2", "a ready", "dispatch a create g2"}, status: dag.WorkflowRunning},
			{do: formula("a", 1, dag.FormulaSucceeded), want: nil, status: dag.WorkflowRunning}, // the old generation's
			{do: formula("a", 2, dag.FormulaSucceeded), want: []string{"b ready", "dispatch b create g2"}},
			{do: formula("b", 2, dag.FormulaSucceeded), want: []string{"workflow succeeded"}, status: dag.WorkflowSucceeded},
		},
		"redelivered and late events change nothing": {
			{do: submit(chain)},
			{do: formula("a", 1, dag.FormulaSucceeded), want: []string{"b ready", "dispatch b create g1"}},
			{do: formula("a", 1, dag.FormulaSucceeded), want: nil},
			{do: formula("a", 1, dag.FormulaRunning), want: nil, status: dag.WorkflowRunning},
		},
		"a running or another end stored after a formula's end revives nothing": {
			{do: submit(gated)},
			{do: formula("a", 1, dag.FormulaRunning), want: nil},
			{do: formula("a", 1, dag.FormulaSucceeded), want: []string{"a gating", "gate a"}},
			{do: formula("a", 1, dag.FormulaRunning), want: nil},
			{do: formula("a", 1, dag.FormulaSucceeded), want: nil},
			{do: health("a", true), want: []string{"a healthy", "b ready", "dispatch b create g1"}},
			{do: formula("a", 1, dag.FormulaRunning), want: nil},
			{do: formula("a", 1, dag.FormulaSucceeded), want: nil},
			{do: formula("b", 1, dag.FormulaFailed), want: []string{"workflow failed: formula b failed"}, status: dag.WorkflowFailed},
			{do: formula("b", 1, dag.FormulaRunning), want: nil, status: dag.WorkflowFailed},
			{do: formula("b", 1, dag.FormulaSucceeded), want: nil, status: dag.WorkflowFailed},
		},
		"unknown workflows and formulas are ignored": {
			{do: submit(chain)},
			{do: formula("zz", 1, dag.FormulaSucceeded), want: nil, status: dag.WorkflowRunning},
			{do: func(h *harness) error {
				return h.handle(&events.FormulaEvent{Ref: events.Ref{WorkflowID: "nope", Workflow: "w", Operation: dag.OpCreate, Formula: "a", Host: "h1", Generation: 1}, Status: dag.FormulaSucceeded})
			}, want: nil},
		},
		"control of an unknown workflow": {
			{do: submit(chain)},
			{do: func(h *harness) error {
				_, err := h.e.Control(context.Background(), "nope", events.VerbPause, operator)
				return err
			}, err: ErrNotFound, status: dag.WorkflowRunning},
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			for i, s := range steps {
				err := s.do(h)
				if s.err != nil {
					if !errors.Is(err, s.err) {
						t.Fatalf("step %d: error %v, want %v", i, err, s.err)
					}
				} else if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got := h.stored()
				if s.want != nil || i > 0 {
					if !slices.Equal(got, s.want) {
						t.Fatalf("step %d stored\n  %s\nwant\n  %s", i, strings.Join(got, "\n  "), strings.Join(s.want, "\n  "))
					}
				}
				if s.status != "" && h.status() != s.status {
					t.Fatalf("step %d: status %s, want %s", i, h.status(), s.status)
				}
			}
		})
	}
}

// laggingWorkflows is a replica behind the others: it holds none of the
// workflows the leader (the memory bucket under it) holds.
type laggingWorkflows struct {
	*eventbustest.MemoryBucket[Record]
}

func (laggingWorkflows) Get(context.Context, string) (Record, uint64, error) {
	return Record{}, 0, events.ErrNoRecord
}

// An event of a workflow that the replica read does not hold, while the
// leader does (a replica cut off in a partition), is not ignored: it is
// handled again later. Ignored, its run stayed stuck.
func TestEventOfAWorkflowOnALaggingReplicaComesBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if err := h.submit(chain); err != nil {
		t.Fatal(err)
	}
	h.fresh() // nothing in memory: the event's workflow is read from the store
	h.e.Workflows = laggingWorkflows{h.workflows}
	ev := &events.FormulaEvent{Ref: events.Ref{WorkflowID: h.id, Workflow: "w", Operation: dag.OpCreate, Formula: "a", Host: "h1", Generation: 1}, Status: dag.FormulaSucceeded}
	err := h.handle(ev)
	if err == nil || !strings.Contains(err.Error(), "a replica behind") {
		t.Fatalf("the event was ignored (err %v): it must come back", err)
	}
	h.e.Workflows = h.workflows // the replica caught up
	if err := h.handle(ev); err != nil {
		t.Fatal(err)
	}
	if got := h.stored(); !slices.Contains(got, "dispatch b create g1") {
		t.Errorf("stored %v: want b dispatched once a succeeded", got)
	}
}

// The planner passes by unread every known event type but formula and
// health events; one this version does not know is read (and refused).
func TestIgnores(t *testing.T) {
	for typ, want := range map[events.Type]bool{
		events.NodeType(dag.NodeRunning): true, events.NodeType(dag.NodeSucceeded): true, events.TypeProgressUpdate: true,
		events.FormulaType(dag.FormulaSucceeded): false, events.FormulaType(dag.FormulaRunning): false,
		events.TypeHealthPassed: false, events.TypeHealthAttempt: false, "gantry.node.exploded": false, "gantry.future.thing": false,
	} {
		if got := Ignores(typ); got != want {
			t.Errorf("Ignores(%q) = %v, want %v", typ, got, want)
		}
	}
}
