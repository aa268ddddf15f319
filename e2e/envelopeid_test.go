package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
)

// envelopeIDSpace is pkg/eventbus's idSpace, from which envelope ids were
// the UUIDv5 of the logical message id, which anyone can work out.
var envelopeIDSpace = uuid.MustParse("9f0c9d5e-1c7e-4b0a-9a57-5f8a3f2c7d10")

// TestNoIdentityClaimsTheWorkflowEndsEnvelopeID: a health-gate credential
// publishes, on decky.<host>.health where it may, a well formed health
// event (admitted: its type's subject, its host) with the envelope id
// the planner's "workflow succeeded" had when ids came from logical ids.
// gantry watch took it in first; the planner's real end was then a
// "repeat" and never shown: watch never ended (until --timeout, exit 3).
// Envelope ids now come from the keyed wire id, and readers take an
// event once by type and id.
func TestNoIdentityClaimsTheWorkflowEndsEnvelopeID(t *testing.T) {
	s := newStack(t, stackOptions{})
	bin := buildGantry(t)
	c := &dag.Composition{Name: "victim", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "a", Server: "me", Nodes: []dag.Node{{Name: "n", Run: "sleep 2"}}}}}
	id := s.mustSubmit(c)

	gate := s.ns.Connect(events.HealthGate)
	logical := events.MsgID(id, "1", "workflow", string(dag.WorkflowSucceeded), "0")
	ev := &events.HealthEvent{Ref: events.Ref{WorkflowID: id, Workflow: "victim", Formula: "a", Host: "me", Operation: dag.OpCreate, Generation: 1},
		Status: events.HealthPass, Run: events.Run{Attempt: 1}}
	env, err := events.NewAt(uuid.NewSHA1(envelopeIDSpace, []byte(logical)).String(), "health-gate/x", time.Now(), ev)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	if err := events.Admit(events.HostHealth("me"), env); err != nil {
		t.Fatalf("the forged event is not even admitted: %v", err)
	}
	m := nats.NewMsg(events.HostHealth("me"))
	m.Data = b
	m.Header.Set(nats.MsgIdHdr, uuid.NewString()) // its own wire id: nothing claimed in JetStream
	if err := gate.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := gate.Flush(); err != nil {
		t.Fatal(err)
	}
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s", d.Status)
	}
	start := time.Now()
	cmd := exec.Command(bin, "watch", id, "--timeout", "15s", "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))
	out, err := cmd.CombinedOutput()
	t.Logf("gantry watch (%s, err %v):\n%s", time.Since(start).Round(time.Millisecond), err, out)
	if err != nil || !strings.Contains(string(out), "succeeded") {
		t.Errorf("gantry watch of a workflow that succeeded did not end with it: a health-gate event holding the id of the planner's end hid it")
	}
}
