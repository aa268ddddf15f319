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

// A host whose name has dots is written in subjects as its host token
// (dots as '_'), which ParseSubject returns; a subject never has a name
// with dots in the host's place.
func TestHostSubjectsCarryTheHostToken(t *testing.T) {
	cases := []struct {
		subject string
		want    string
		parsed  events.Subject
	}{
		{events.HostLifecycle("10.0.0.5"), "decky.10_0_0_5.lifecycle", events.Subject{Kind: events.KindHostLifecycle, Host: "10_0_0_5"}},
		{events.HostDispatch("web-1.example.com", ""), "decky.web-1_example_com.dispatch._", events.Subject{Kind: events.KindDispatch, Host: "web-1_example_com"}},
		{events.HostDispatch("10.0.0.5", "eu-1"), "decky.10_0_0_5.dispatch.eu-1", events.Subject{Kind: events.KindDispatch, Host: "10_0_0_5", Zone: "eu-1"}},
		{events.HostGate("10.0.0.5"), "decky.10_0_0_5.gate", events.Subject{Kind: events.KindGate, Host: "10_0_0_5"}},
		{events.HostHealth("web-1.example.com"), "decky.web-1_example_com.health", events.Subject{Kind: events.KindHealth, Host: "web-1_example_com"}},
		{events.HostLogs("10.0.0.5", "conf"), "decky.10_0_0_5.logs.conf", events.Subject{Kind: events.KindLogs, Host: "10_0_0_5", Node: "conf"}},
		{events.HostLogs("*", "*"), "decky.*.logs.*", events.Subject{}},
		{events.HostLifecycle("cp-0"), "decky.cp-0.lifecycle", events.Subject{Kind: events.KindHostLifecycle, Host: "cp-0"}},
	}
	for _, tc := range cases {
		if tc.subject != tc.want {
			t.Errorf("built %q, want %q", tc.subject, tc.want)
		}
		if tc.parsed.Kind == "" {
			continue
		}
		got, err := events.ParseSubject(tc.subject)
		if err != nil || got != tc.parsed {
			t.Errorf("ParseSubject(%q) = %+v, %v; want %+v", tc.subject, got, err, tc.parsed)
		}
	}
	if _, err := events.ParseSubject("decky.10.0.0.5.lifecycle"); !errors.Is(err, events.ErrBadSubject) {
		t.Errorf("a host name with dots in a subject parsed: %v", err)
	}
	if got := events.HostNodeKey("10.0.0.5", "w", "f", "n"); got != "host.10_0_0_5.w.f.n" {
		t.Errorf("HostNodeKey %q", got)
	}
	if got := events.HostNodePrefix("web-1.example.com"); got != "host.web-1_example_com." {
		t.Errorf("HostNodePrefix %q", got)
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

// Every stream stores some subjects, and no subject is stored by two
// streams.
func TestStreamLayout(t *testing.T) {
	seen := map[string]string{}
	for _, name := range events.StreamNames {
		if len(events.StreamSubjects(name)) == 0 {
			t.Errorf("stream %s stores no subject", name)
		}
		for _, sub := range events.StreamSubjects(name) {
			if other, dup := seen[sub]; dup {
				t.Errorf("subject %s in %s and %s", sub, other, name)
			}
			seen[sub] = name
		}
	}
	if got := events.StreamSubjects("NOT_A_STREAM"); got != nil {
		t.Errorf("subjects of an unknown stream: %v", got)
	}
}
