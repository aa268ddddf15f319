package events_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// knownTypes is every type this version defines.
func knownTypes() []events.Type {
	var ts []events.Type
	for _, s := range []dag.WorkflowState{dag.WorkflowAccepted, dag.WorkflowRunning, dag.WorkflowPaused, dag.WorkflowSucceeded, dag.WorkflowFailed, dag.WorkflowCancelled} {
		ts = append(ts, events.WorkflowType(s))
	}
	for _, s := range []dag.FormulaState{dag.FormulaReady, dag.FormulaRunning, dag.FormulaSucceeded, dag.FormulaGating, dag.FormulaHealthy,
		dag.FormulaUnhealthy, dag.FormulaFailed, dag.FormulaBlocked, dag.FormulaCancelled} {
		ts = append(ts, events.FormulaType(s))
	}
	for _, s := range []dag.NodeState{dag.NodeRunning, dag.NodeSucceeded, dag.NodeFailed, dag.NodeSkipped, dag.NodeBlocked, dag.NodeCancelled} {
		ts = append(ts, events.NodeType(s))
	}
	return append(ts, events.TypeHealthAttempt, events.TypeHealthPassed, events.TypeHealthFailed, events.TypeLogLine,
		events.TypeDispatch, events.TypeGateRequest, events.TypeRolloutBatchStarted, events.TypeRolloutBatchFinished,
		events.TypeRolloutStopped, events.TypeProgressUpdate)
}

// Every type has an origin whose producers may publish where it travels,
// and the types a subject alone cannot bind to their sender are exactly
// the planner's or an executor's own on decky.<host>.lifecycle, where both
// publish.
func TestEveryTypeHasAnOrigin(t *testing.T) {
	for _, typ := range knownTypes() {
		o, ok := events.OriginOf(typ)
		if !ok {
			t.Errorf("%s: no origin", typ)
			continue
		}
		pubs := events.Publishers(o.Kind)
		for _, id := range o.By {
			if !slices.Contains(pubs, id) {
				t.Errorf("%s: produced by %s, which may not publish on %s subjects (only %v)", typ, id, o.Kind, pubs)
			}
		}
		// Only on decky.<host>.lifecycle may another identity than a
		// type's producer publish.
		want := o.Kind != events.KindHostLifecycle || len(o.By) == 2
		if got := events.SenderBound(typ); got != want {
			t.Errorf("%s on %s: SenderBound %v, want %v (publishers %v, producers %v)", typ, o.Kind, got, want, pubs, o.By)
		}
	}
	if _, ok := events.OriginOf("gantry.node.pending"); ok {
		t.Error("gantry.node.pending has an origin: nobody produces it")
	}
	// Only the planner publishes where a workflow's state is told.
	if got := events.Publishers(events.KindWorkflowLifecycle); !slices.Equal(got, []events.Identity{events.Planner}) {
		t.Errorf("workflow lifecycle publishers %v, want only the planner", got)
	}
	if got := events.Publishers(events.KindHealth); !slices.Equal(got, []events.Identity{events.HealthGate}) {
		t.Errorf("health publishers %v, want only the health-gate", got)
	}
}

func envelope(t *testing.T, p events.Payload) *events.Envelope {
	t.Helper()
	env, err := events.New("test/1", p)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestAdmit(t *testing.T) {
	ref := events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Operation: dag.OpCreate, Generation: 1}
	node := ref
	node.Node = "n"
	formula := &events.FormulaEvent{Ref: ref, Status: dag.FormulaSucceeded}
	workflow := &events.WorkflowEvent{Ref: events.Ref{WorkflowID: "wf1", Workflow: "w", Operation: dag.OpCreate, Generation: 1}, Status: dag.WorkflowSucceeded}
	health := &events.HealthEvent{Ref: ref, Status: events.HealthPass, Final: true}
	line := &events.LogLine{Ref: node, Stream: events.Stdout, Seq: 1, Line: "x"}
	dotted := &events.FormulaEvent{Ref: ref, Status: dag.FormulaSucceeded}
	dotted.Host = "10.0.0.5"
	dottedLine := &events.LogLine{Ref: node, Stream: events.Stdout, Seq: 1, Line: "x"}
	dottedLine.Host = "10.0.0.5"
	cases := []struct {
		name    string
		subject string
		p       events.Payload
		refused string // "" admitted; else in the error
	}{
		{"formula on its host's lifecycle", "decky.h1.lifecycle", formula, ""},
		{"workflow on its lifecycle", "workflow.wf1.lifecycle", workflow, ""},
		{"health on its host's health", "decky.h1.health", health, ""},
		{"log line on its node's logs", "decky.h1.logs.n", line, ""},
		{"formula success on a health subject", "decky.h1.health", formula, "comes only on host_lifecycle"},
		{"workflow success on a health subject", "decky.h1.health", workflow, "comes only on workflow_lifecycle"},
		{"workflow success on a host lifecycle", "decky.h1.lifecycle", workflow, "comes only on workflow_lifecycle"},
		{"health verdict on a lifecycle subject", "decky.h1.lifecycle", health, "comes only on health"},
		{"formula about another host", "decky.h2.lifecycle", formula, `about host "h1"`},
		{"health about another host", "decky.h2.health", health, `about host "h1"`},
		{"workflow about another workflow", "workflow.wf2.lifecycle", workflow, `about workflow "wf1"`},
		{"log line of another node", "decky.h1.logs.m", line, `about node "n"`},
		{"dispatch on a lifecycle subject", "decky.h1.lifecycle", &events.Dispatch{Ref: ref}, "comes only on dispatch"},
		{"not a gantry subject", "foo.bar", formula, "not a gantry subject"},
		{"dotted host on its token's lifecycle", "decky.10_0_0_5.lifecycle", dotted, ""},
		{"dotted host's log line on its token's logs", "decky.10_0_0_5.logs.n", dottedLine, ""},
		{"dotted host on another token", "decky.10_0_0_6.lifecycle", dotted, `about host "10.0.0.5"`},
		{"plain host on a dotted host's token", "decky.10_0_0_5.lifecycle", formula, `about host "h1"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := events.Admit(c.subject, envelope(t, c.p))
			switch {
			case c.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.refused != "" && err == nil:
				t.Fatal("admitted")
			case c.refused != "" && (!errors.Is(err, events.ErrNotAdmitted) || !strings.Contains(err.Error(), c.refused)):
				t.Fatalf("error %q, want ErrNotAdmitted naming %q", err, c.refused)
			}
		})
	}
}

// TestWorkflowEventOn: a message on a workflow's lifecycle is its workflow
// event when it came the way workflow events come; an event of another
// family, or bytes that are no event, are none (no error); one about
// another workflow is refused, naming why.
func TestWorkflowEventOn(t *testing.T) {
	workflow := &events.WorkflowEvent{Ref: events.Ref{WorkflowID: "wf1", Workflow: "w", Operation: dag.OpCreate, Generation: 2}, Status: dag.WorkflowCancelled}
	formula := &events.FormulaEvent{Ref: events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Operation: dag.OpCreate, Generation: 1}, Status: dag.FormulaSucceeded}
	data := func(p events.Payload) []byte {
		b, err := json.Marshal(envelope(t, p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name, subject string
		data          []byte
		want          bool   // a workflow event comes out
		refused       string // "" none; else in the error
	}{
		{"its workflow's", "workflow.wf1.lifecycle", data(workflow), true, ""},
		{"another workflow's subject", "workflow.wf2.lifecycle", data(workflow), false, `about workflow "wf1"`},
		{"a formula event", "workflow.wf1.lifecycle", data(formula), false, ""},
		{"not an event", "workflow.wf1.lifecycle", []byte("{not json"), false, ""},
	} {
		w, err := events.WorkflowEventOn(c.subject, c.data)
		switch {
		case c.refused != "" && (!errors.Is(err, events.ErrNotAdmitted) || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: err %v, want refused with %q", c.name, err, c.refused)
		case c.refused == "" && err != nil:
			t.Errorf("%s: err %v", c.name, err)
		case c.want != (w != nil):
			t.Errorf("%s: event %+v, want one: %t", c.name, w, c.want)
		case w != nil && (w.WorkflowID != "wf1" || w.Generation != 2 || w.Status != dag.WorkflowCancelled):
			t.Errorf("%s: event %+v", c.name, w)
		}
	}
}
