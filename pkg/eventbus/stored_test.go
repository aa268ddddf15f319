package eventbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stored is every message of the event stream, in order, as an
// administrator reads them.
func stored(ctx context.Context, t *testing.T, ns *natstest.Server) []*jetstream.RawStreamMsg {
	t.Helper()
	admin, err := jetstream.New(ns.Connect(busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	st, err := admin.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*jetstream.RawStreamMsg
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return msgs
		}
		msgs = append(msgs, m)
	}
}

// storedTypes is the type of every event in the event stream, in order.
func storedTypes(ctx context.Context, t *testing.T, ns *natstest.Server) []events.Type {
	t.Helper()
	var types []events.Type
	for _, m := range stored(ctx, t, ns) {
		env, err := events.Parse(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, env.Type)
	}
	return types
}

// executorBus is a server with auth, a connection as the executor and its
// JetStream with the executor's streams and buckets, as the executor
// opens them.
func executorBus(ctx context.Context, t *testing.T) (*natstest.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	ns := natstest.Start(t)
	nc := ns.Connect(events.Executor)
	js, err := eventbus.Open(ctx, nc, events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ns, nc, js
}

// reconnect drops nc's connection and waits until it is back.
func reconnect(ctx context.Context, t *testing.T, nc *nats.Conn) {
	t.Helper()
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	for nc.Stats().Reconnects == 0 || !nc.IsConnected() {
		if ctx.Err() != nil {
			t.Fatal("no reconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
