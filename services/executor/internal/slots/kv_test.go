package slots_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSlotGivenBackAcrossADisconnect: a slot given back while the
// executor's connection is down (it keeps nothing to send then) is
// deleted once the connection is back, within the give-back's wait; the
// delete failed at once, and the slot stayed taken until it expired
// (events.SlotTTL), holding up every node waiting for its limit.
func TestSlotGivenBackAcrossADisconnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	log := slog.New(slog.DiscardHandler)
	creds, seed := ns.Keys.Credentials(events.Executor)
	nc, err := natsconn.Connect(natsconn.Options{URL: ns.URL(), Creds: creds, NKey: seed, InboxPrefix: events.Executor.InboxPrefix()}, "gantry-test", log, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := eventbus.Open(ctx, nc, events.Executor, 1, log)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketSlots)
	if err != nil {
		t.Fatal(err)
	}
	m := &slots.Manager{Store: slots.KV{KV: kv, NC: nc}, Executor: "executor/a", Log: log}
	limit := dag.SlotLimit{ID: "n-h1", Name: "host h1", MaxParallel: 1}
	lease, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{limit}, Attempt: "w.1.f.n.1"})
	if err != nil {
		t.Fatal(err)
	}
	ns.Stop()
	for nc.IsConnected() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	released := make(chan struct{})
	go func() { defer close(released); lease.Release() }()
	time.Sleep(300 * time.Millisecond) // the node ended while the server was down
	ns.StartAgain()
	<-released
	admin, err := jetstream.New(ns.Connect(busauth.Admin, nats.MaxReconnects(-1)))
	if err != nil {
		t.Fatal(err)
	}
	akv, err := admin.KeyValue(ctx, events.BucketSlots)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := akv.Get(ctx, slots.SlotKey(limit.ID, 0)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		held := ""
		if e != nil {
			held = string(e.Value())
		}
		t.Fatalf("the slot given back during the disconnect is still taken (%v %s): it stays so until it expires, %s after its last refresh", err, held, events.SlotTTL)
	}
}
