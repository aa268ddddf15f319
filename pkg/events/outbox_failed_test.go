package events_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
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
	ns := natstest.Start(t)
	nc := ns.Connect(events.Executor)
	js, err := events.Open(ctx, nc, events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	djs := &downJS{losingJS: losingJS{JetStream: js}}
	pub := &events.Publisher{JS: djs, NC: nc, Source: "executor/test"}
	ref := events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Node: "n", Operation: dag.OpCreate, Generation: 1}
	out := pub.Outbox()
	out.Emit(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: ref, Status: dag.NodeRunning}, "wf1|1|f|n|running|1")
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	for nc.Stats().Reconnects == 0 || !nc.IsConnected() {
		if ctx.Err() != nil {
			t.Fatal("no reconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	djs.down.Store(true)
	out.Emit(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: ref, Status: dag.NodeSucceeded}, "wf1|1|f|n|succeeded|1")
	djs.down.Store(false)
	if err := out.Flush(ctx); err == nil {
		t.Fatal("Flush reported no error, but the running event was never stored")
	}
	time.Sleep(200 * time.Millisecond) // an asynchronous publish would be stored by now
	admin, err := jetstream.New(ns.Connect(busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	st, err := admin.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var order []events.Type
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			break
		}
		env, err := events.Parse(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, env.Type)
	}
	if len(order) != 0 {
		t.Fatalf("stream holds %v after the running event could not be stored, want nothing", order)
	}
}
