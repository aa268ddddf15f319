package natsembed

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestSpike(t *testing.T) {
	keys, err := busauth.LoadOrCreate(t.TempDir(), busauth.Admin)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := Start(Config{StoreDir: t.TempDir(), Auth: keys, AnonymousViewer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Stop()
	conn := func(id events.Identity) *nats.Conn {
		opt, err := nats.NkeyOptionFromSeed(keys.SeedFile(id))
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(ns.URL(), opt, nats.CustomInboxPrefix(id.InboxPrefix()), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { t.Logf("%s: async %v", id, err) }))
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	ctx := context.Background()
	for _, id := range events.Services {
		nc := conn(id)
		if _, err := events.Open(ctx, nc, id, 1); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	pl := conn(events.Planner)
	sub, err := pl.QueueSubscribe(events.SubjectSubmit, "q", func(m *nats.Msg) {
		t.Logf("submit header: %v", m.Header.Get(events.RequestInfoHeader))
		m.Respond([]byte("ok"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	pl.Flush()
	pjs, _ := jetstream.New(pl)
	kv, err := pjs.KeyValue(ctx, events.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "wf1", []byte(`{"generation":2}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := pjs.Publish(ctx, events.HostLifecycle("h1"), []byte("hello")); err != nil {
		t.Fatal(err)
	}
	op := conn(events.Operator)
	m := nats.NewMsg(events.SubjectSubmit)
	m.Header.Set(events.RequestInfoHeader, `{"user":"forged"}`)
	m.Data = []byte("x")
	r, err := op.RequestMsg(m, 2*time.Second)
	t.Logf("operator submit: %v %v", r, err)
	anon, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	r, err = anon.Request(events.SubjectSubmit, []byte("x"), 2*time.Second)
	t.Logf("anon submit: %v %v", r, err)
	js, _ := jetstream.New(anon)
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.AllHostLifecycle, events.AllHealth}})
	if err != nil {
		t.Fatalf("ordered: %v", err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(3 * time.Second))
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	t.Logf("viewer got %s %s", msg.Subject(), msg.Data())
	vkv, err := js.KeyValue(ctx, events.BucketRuns)
	if err != nil {
		t.Fatalf("viewer kv: %v", err)
	}
	e, err := vkv.Get(ctx, "wf1")
	t.Logf("viewer kv get: %v %v", e, err)
	if e != nil {
		t.Logf("value %s", e.Value())
	}
	_, err = vkv.Put(ctx, "wf1", []byte("x"))
	t.Logf("viewer put: %v", err)
	err = js.DeleteStream(ctx, events.StreamEvents)
	t.Logf("viewer delete stream: %v", err)
	_, err = js.Publish(ctx, events.HostLifecycle("h1"), []byte("forged"))
	t.Logf("viewer publish: %v", err)
}
