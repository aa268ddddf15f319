package eventbus_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// downJS loses its first asynchronous publish, and its synchronous
// publishes fail while down is set: the server is gone for longer than
// a publish's retries.
type downJS struct {
	losingJS
	down atomic.Bool
}

func (d *downJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if d.down.Load() {
		return nil, errors.New("no server")
	}
	return d.losingJS.PublishMsg(ctx, m, opts...)
}

func (d *downJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return d.losingJS.PublishMsgAsync(m, opts...)
}

// When the events an outbox is behind on cannot be stored, nothing
// emitted after them is sent either: the unit of work fails at its Flush
// and is done again, and a node's "succeeded" is never stored without
// (or before) its "running".
func TestOutboxSendsNothingAfterAFailedCatchUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns, nc, js := executorBus(ctx, t)
	djs := &downJS{losingJS: losingJS{JetStream: js}}
	pub := &eventbus.Publisher{JS: djs, NC: nc, Source: "executor/test"}
	ref := events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Node: "n", Operation: dag.OpCreate, Generation: 1}
	out := pub.Outbox()
	out.Emit(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: ref, Status: dag.NodeRunning}, "wf1|1|f|n|running|1")
	reconnect(ctx, t, nc)
	djs.down.Store(true)
	out.Emit(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: ref, Status: dag.NodeSucceeded}, "wf1|1|f|n|succeeded|1")
	djs.down.Store(false)
	if err := out.Flush(ctx); err == nil {
		t.Fatal("Flush reported no error, but the running event was never stored")
	}
	time.Sleep(200 * time.Millisecond) // an asynchronous publish would be stored by now
	order := storedTypes(ctx, t, ns)
	if len(order) != 0 {
		t.Fatalf("stream holds %v after the running event could not be stored, want nothing", order)
	}
}

// slowJS loses its first asynchronous publish, and holds every
// synchronous publish (a re-send) until release is closed, saying when
// one is held.
type slowJS struct {
	losingJS
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *slowJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	s.once.Do(func() { close(s.held) })
	<-s.release
	return s.losingJS.PublishMsg(ctx, m, opts...)
}

func (s *slowJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return s.losingJS.PublishMsgAsync(m, opts...)
}

// Nodes of one formula emit from goroutines of their own into one outbox.
// While one goroutine's Emit stores the events the outbox is behind on,
// another's event waits for that: node n's "succeeded" is never stored
// before its "running" that the catch-up is storing.
func TestOutboxKeepsOrderWhileCatchingUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns, nc, js := executorBus(ctx, t)
	sjs := &slowJS{losingJS: losingJS{JetStream: js}, held: make(chan struct{}), release: make(chan struct{})}
	pub := &eventbus.Publisher{JS: sjs, NC: nc, Source: "executor/test"}
	ref := events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Operation: dag.OpCreate, Generation: 1}
	n, m := ref, ref
	n.Node, m.Node = "n", "m"
	out := pub.Outbox()
	out.Emit(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: n, Status: dag.NodeRunning}, "wf1|1|f|n|running|1") // lost
	reconnect(ctx, t, nc)
	caughtUp := make(chan struct{})
	go func() { // node m's goroutine: its Emit stores n's running again, slowly
		defer close(caughtUp)
		out.Emit(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: m, Status: dag.NodeRunning}, "wf1|1|f|m|running|1")
	}()
	<-sjs.held
	sent := make(chan struct{})
	go func() { // node n's goroutine
		defer close(sent)
		out.Emit(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: n, Status: dag.NodeSucceeded}, "wf1|1|f|n|succeeded|1")
	}()
	select {
	case <-sent:
	case <-time.After(300 * time.Millisecond):
	}
	time.Sleep(200 * time.Millisecond) // an asynchronous publish would be stored by now
	close(sjs.release)
	<-caughtUp
	<-sent
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, msg := range stored(ctx, t, ns) {
		_, ev, err := events.Decode[events.NodeEvent](msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, ev.Node+" "+string(ev.Status))
	}
	if i, j := slices.Index(order, "n running"), slices.Index(order, "n succeeded"); i < 0 || j < 0 || j < i {
		t.Fatalf("stream holds %v: n's succeeded before (or without) its running", order)
	}
}
