package eventbustest_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// The event port contract: eventbus.Outbox on a real JetStream server
// (auth on, as the planner publishes) and eventbustest.MemoryOutbox, which
// the services' tests use in its place, store alike: by Flush, what was
// emitted, in order, each message id once (the JetStream one may store
// some before); and a Publish at once.

// emitter is what the suite asks of an outbox.
type emitter interface {
	Emit(ctx context.Context, subject string, pl events.Payload, msgID string)
	Flush(ctx context.Context) error
	Publish(ctx context.Context, subject string, pl events.Payload, msgID string) error
}

// outbox is one outbox under the contract, with what it has stored: each
// event's subject and the JSON of its payload, in order.
type outbox struct {
	emitter
	stored func(t *testing.T) []string
}

func outboxes(t *testing.T, ctx context.Context) map[string]outbox {
	ns := natstest.Start(t)
	nc := ns.Connect(events.Planner)
	js, err := eventbus.Open(ctx, nc, events.Planner, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := &eventbus.Publisher{JS: js, NC: nc, Source: "planner/contract"}
	mem := &eventbustest.MemoryOutbox{}
	return map[string]outbox{
		"jetstream": {outboxOf{pub.Outbox(), pub}, func(t *testing.T) []string { return readStream(ctx, t, js) }},
		"memory": {mem, func(*testing.T) []string {
			var out []string
			for _, e := range mem.Stored() {
				out = append(out, line(e.Subject, e.Payload))
			}
			return out
		}},
	}
}

// outboxOf is an Outbox with its publisher's Publish.
type outboxOf struct {
	*eventbus.Outbox
	pub *eventbus.Publisher
}

func (o outboxOf) Publish(ctx context.Context, subject string, pl events.Payload, msgID string) error {
	return o.pub.Publish(ctx, subject, pl, msgID)
}

func line(subject string, pl events.Payload) string {
	b, _ := json.Marshal(pl)
	return subject + " " + string(b)
}

// readStream is every event GANTRY_EVENTS holds, read back.
func readStream(ctx context.Context, t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	str, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for m := range batch.Messages() {
		env, err := events.Parse(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		pl, err := env.Payload()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, line(m.Subject(), pl))
	}
	return out
}

func TestOutboxStoresEachEventOnceInOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref := events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Node: "n", Operation: dag.OpCreate, Generation: 1}
	running := &events.NodeEvent{Ref: ref, Status: dag.NodeRunning, Run: events.Run{Attempt: 1}}
	succeeded := &events.NodeEvent{Ref: ref, Status: dag.NodeSucceeded, Run: events.Run{Attempt: 1}}
	formula := &events.FormulaEvent{Ref: events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Operation: dag.OpCreate, Generation: 1}, Status: dag.FormulaSucceeded}
	subject := events.HostLifecycle("h1")
	for name, o := range outboxes(t, ctx) {
		t.Run(name, func(t *testing.T) {
			o.Emit(ctx, subject, running, "wf1|1|f|n|running|1")
			o.Emit(ctx, subject, succeeded, "wf1|1|f|n|succeeded|1")
			o.Emit(ctx, subject, running, "wf1|1|f|n|running|1") // again: stored once
			if err := o.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := o.Publish(ctx, subject, formula, "wf1|1|f|formula-succeeded"); err != nil {
				t.Fatal(err)
			}
			want := []string{line(subject, running), line(subject, succeeded), line(subject, formula)}
			if got := o.stored(t); !slices.Equal(got, want) {
				t.Fatalf("stored\n%q\nwant\n%q", got, want)
			}
		})
	}
}
