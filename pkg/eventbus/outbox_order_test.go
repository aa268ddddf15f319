package eventbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// losingJS loses its first asynchronous publish, as one in flight when
// the server dies is lost: never stored, never answered.
type losingJS struct {
	jetstream.JetStream
	lost bool
}

type lostFuture struct{ msg *nats.Msg }

func (f lostFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (f lostFuture) Err() <-chan error            { return nil }
func (f lostFuture) Msg() *nats.Msg               { return f.msg }

func (l *losingJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if !l.lost {
		l.lost = true
		return lostFuture{m}, nil
	}
	return l.JetStream.PublishMsgAsync(m, opts...)
}

// A node's "running" lost in flight while the connection drops is stored
// before the "succeeded" emitted after the reconnect, not after it: the
// outbox stores what may be lost before it sends anything new.
func TestOutboxKeepsOrderAcrossAReconnect(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns, nc, js := executorBus(ctx, t)
	pub := &eventbus.Publisher{JS: &losingJS{JetStream: js}, NC: nc, Source: "executor/test"}
	ref := events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Node: "n", Operation: dag.OpCreate, Generation: 1}
	out := pub.Outbox()
	out.Emit(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: ref, Status: dag.NodeRunning}, "wf1|1|f|n|running|1")
	reconnect(ctx, t, nc)
	out.Emit(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: ref, Status: dag.NodeSucceeded}, "wf1|1|f|n|succeeded|1")
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	order := storedTypes(ctx, t, ns)
	want := []events.Type{events.NodeType(dag.NodeRunning), events.NodeType(dag.NodeSucceeded)}
	if len(order) != 2 || order[0] != want[0] || order[1] != want[1] {
		t.Fatalf("stream holds %v, want %v", order, want)
	}
}
