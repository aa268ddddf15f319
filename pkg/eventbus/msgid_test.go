package eventbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/events/eventstest"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// A message stored first under the logical id of a transition that has not
// happened yet, by another identity that may publish into the stream, does
// not take that transition's place: the producer's wire id is keyed with
// its credential. The producer's own retries (another connection with the
// same credential: a replica, a restart) are still stored once.
func TestMessageIDsCannotBeTakenFirst(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	open := func(id events.Identity) (*eventbus.Publisher, jetstream.JetStream) {
		t.Helper()
		nc := ns.Connect(id)
		js, err := eventbus.Open(ctx, nc, id, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &eventbus.Publisher{JS: js, NC: nc, Source: string(id) + "/test"}, js
	}
	exe, _ := open(events.Executor)
	gate, _ := open(events.HealthGate)
	ref := events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Operation: dag.OpCreate, Generation: 1}
	logical := events.MsgID("wf1", "1", "f", "", "formula-succeeded", "0")
	// The attacker (a stolen health-gate credential) stores junk under
	// every id it can think of for the executor's coming success.
	junk := &events.HealthEvent{Ref: ref, Status: events.HealthFail}
	for _, id := range []string{logical, logical + "~", logical + "~AAAAAAAAAAAAAAAAAAAAAAAA"} {
		if _, err := gate.JS.Publish(ctx, events.HostHealth("h1"), mustMarshal(t, junk), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	success := &events.FormulaEvent{Ref: ref, Status: dag.FormulaSucceeded}
	if err := exe.Publish(ctx, events.HostLifecycle("h1"), success, logical); err != nil {
		t.Fatal(err)
	}
	// A second executor process (same credential) publishes it again.
	exe2, _ := open(events.Executor)
	out := exe2.Outbox()
	out.Emit(ctx, events.HostLifecycle("h1"), success, logical)
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range stored(ctx, t, ns) {
		if m.Subject == events.HostLifecycle("h1") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the executor's success stored %d times, want once (dropped as a duplicate of the junk, or its retry not deduplicated)", n)
	}
}

func mustMarshal(t *testing.T, p events.Payload) []byte {
	t.Helper()
	b, _, err := eventstest.Marshal("test", p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
