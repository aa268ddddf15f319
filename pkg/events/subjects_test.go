package events_test

import (
	"errors"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
)

func TestSubjectsRoundTrip(t *testing.T) {
	id := "0b5c3a52-4f0c-4c51-9d0e-7a4d2f9e8a11"
	cases := []struct {
		subject string
		want    events.Subject
	}{
		{events.SubjectSubmit, events.Subject{Kind: events.KindSubmit}},
		{events.SubjectValidate, events.Subject{Kind: events.KindValidate}},
		{events.WorkflowLifecycle(id), events.Subject{Kind: events.KindWorkflowLifecycle, WorkflowID: id}},
		{events.WorkflowControl(id, events.VerbCancel), events.Subject{Kind: events.KindWorkflowControl, WorkflowID: id, Verb: "cancel"}},
		{events.WorkflowControl(id, events.VerbPause), events.Subject{Kind: events.KindWorkflowControl, WorkflowID: id, Verb: "pause"}},
		{events.WorkflowControl(id, events.VerbResume), events.Subject{Kind: events.KindWorkflowControl, WorkflowID: id, Verb: "resume"}},
		{events.WorkflowControl(id, events.VerbRetry), events.Subject{Kind: events.KindWorkflowControl, WorkflowID: id, Verb: "retry"}},
		{events.HostLifecycle("cp-0"), events.Subject{Kind: events.KindHostLifecycle, Host: "cp-0"}},
		{events.HostDispatch("cp-0", ""), events.Subject{Kind: events.KindDispatch, Host: "cp-0"}},
		{events.HostDispatch("cp-0", "eu-1"), events.Subject{Kind: events.KindDispatch, Host: "cp-0", Zone: "eu-1"}},
		{events.HostGate("cp-0"), events.Subject{Kind: events.KindGate, Host: "cp-0"}},
		{events.HostHealth("cp-0"), events.Subject{Kind: events.KindHealth, Host: "cp-0"}},
		{events.HostLogs("cp-0", "containerd"), events.Subject{Kind: events.KindLogs, Host: "cp-0", Node: "containerd"}},
		{events.StateWorkflow, events.Subject{Kind: events.KindState, Verb: "workflow"}},
		{events.StateList, events.Subject{Kind: events.KindState, Verb: "list"}},
		{events.StateHost, events.Subject{Kind: events.KindState, Verb: "host"}},
		{events.StateDrift, events.Subject{Kind: events.KindState, Verb: "drift"}},
		{events.StatusSubject(events.Executor), events.Subject{Kind: events.KindStatus, Verb: "executor"}},
		{events.StatusSubject(events.HealthGate), events.Subject{Kind: events.KindStatus, Verb: "health-gate"}},
	}
	for _, tc := range cases {
		got, err := events.ParseSubject(tc.subject)
		if err != nil || got != tc.want {
			t.Errorf("ParseSubject(%q) = %+v, %v; want %+v", tc.subject, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "workflow", "workflow.x", "workflow.X.lifecycle", "workflow.id.explode", "decky", "decky.cp-0",
		"decky.CP.lifecycle", "decky.cp-0.logs", "decky.cp-0.logs.a.b", "decky.cp-0.logs.A", "decky.cp-0.nope", "state.nope", "status.nope", "status.operator", "other.thing", "decky.cp-0.lifecycle.x", "decky.cp-0.dispatch", "decky.cp-0.dispatch.EU", "decky.cp-0.dispatch.a.b"} {
		if _, err := events.ParseSubject(bad); !errors.Is(err, events.ErrBadSubject) {
			t.Errorf("ParseSubject(%q) err = %v, want ErrBadSubject", bad, err)
		}
	}
}

func TestTypes(t *testing.T) {
	for _, ty := range []events.Type{"gantry.node.failed", "gantry.formula.gating", "gantry.workflow.paused", events.TypeHealthPassed, events.TypeDispatch} {
		if !ty.Known() {
			t.Errorf("%s not known", ty)
		}
	}
	for _, ty := range []events.Type{"gantry.node.gating", "gantry.formula.skipped", "gantry.workflow.healthy", "gantry.node", "node.failed", ""} {
		if ty.Known() {
			t.Errorf("%s known", ty)
		}
	}
	if s := events.Type("gantry.node.failed").Schema(); s != "urn:gantry:v1:node" {
		t.Errorf("schema %s", s)
	}
}

// Every stream's subjects are disjoint, and every durable consumer names a
// stream that exists.
func TestStreamLayout(t *testing.T) {
	seen := map[string]string{}
	names := map[string]bool{}
	for _, s := range events.Streams(1) {
		names[s.Name] = true
		for _, sub := range s.Subjects {
			if other, dup := seen[sub]; dup {
				t.Errorf("subject %s in %s and %s", sub, other, s.Name)
			}
			seen[sub] = s.Name
		}
	}
	for stream, cs := range events.Consumers() {
		if !names[stream] {
			t.Errorf("consumers for unknown stream %s", stream)
		}
		for _, c := range cs {
			if c.Durable == "" || c.MaxDeliver <= 0 {
				t.Errorf("%s: consumer %+v must be durable with a bounded MaxDeliver", stream, c)
			}
		}
	}
}
