package engine

import (
	"context"
	"reflect"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// The dispatch and the gate request of a host behind jump hosts carry
// them, first hop first, with the addresses normalized (port added).
func TestHostSpecCarriesVia(t *testing.T) {
	t.Parallel()
	const doc = `
name: jumps
hosts:
  bastion: {address: 203.0.113.5, user: ops}
  inner: {address: "10.0.1.1:2222", via: bastion}
  h1: {address: 10.0.0.11, user: root, via: inner}
  h2: {address: 10.0.0.12}
formulas:
  - id: a
    server: h1
    nodes: [{name: x, run: "true"}]
    health_gate: {check: "true", timeout: 10s, retries: 2}
  - id: b
    server: h2
    depends_on: [a]
    nodes: [{name: y, run: "true"}]
`
	h := newHarness(t)
	if err := h.submit(doc); err != nil {
		t.Fatal(err)
	}
	if err := h.handle(&events.FormulaEvent{Ref: events.Ref{WorkflowID: h.id, Workflow: "jumps", Operation: dag.OpCreate, Formula: "a", Host: "h1", Generation: 1}, Status: dag.FormulaSucceeded}); err != nil {
		t.Fatal(err)
	}
	want := events.HostSpec{Transport: dag.TransportSSH, Address: "10.0.0.11:22", User: "root",
		Via: []events.Jump{{Address: "203.0.113.5:22", User: "ops"}, {Address: "10.0.1.1:2222"}}}
	var dispatched, gated bool
	for _, e := range h.out.Stored() {
		switch p := e.Payload.(type) {
		case *events.Dispatch:
			dispatched = true
			if !reflect.DeepEqual(p.Host, want) {
				t.Errorf("dispatch host_spec %+v, want %+v", p.Host, want)
			}
		case *events.GateRequest:
			gated = true
			if !reflect.DeepEqual(p.Host, want) {
				t.Errorf("gate host_spec %+v, want %+v", p.Host, want)
			}
		}
	}
	if !dispatched || !gated {
		t.Fatalf("dispatched %v, gated %v: want both", dispatched, gated)
	}
	// a host reached directly has no via
	rec, _, err := h.workflows.Get(context.Background(), h.id)
	if err != nil {
		t.Fatal(err)
	}
	if got := hostSpec(rec.Composition, "h2"); got.Via != nil || got.Address != "10.0.0.12:22" {
		t.Errorf("h2: %+v", got)
	}
}
