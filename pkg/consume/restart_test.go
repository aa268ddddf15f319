package consume_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// A service's connection keeps nothing to send while the server is down
// (its pulls and acknowledgements fail at once then): its consumer goes on
// with what is published once the server is back.
func TestRunOnAServiceConnectionAcrossAServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	admin, _ := jetstream.New(ns.Connect(busauth.Admin))
	if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"decky.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 10}); err != nil {
		t.Fatal(err)
	}
	_, seed := ns.Keys.Credentials(busauth.Admin)
	nc, err := natsconn.Connect(natsconn.Options{URL: ns.URL(), NKey: seed}, "gantry-test", quiet, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cons, err := js.Consumer(ctx, "T", "c")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var handled []string
	handler := func(_ context.Context, ev *consume.Event) error {
		var n events.NodeEvent
		if err := events.DecodeData(ev.Envelope, &n); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, n.Node)
		return nil
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- consume.Run(rctx, cons, handler, consume.Options{Name: "t", Concurrency: 2, AckWait: time.Second, Logger: quiet})
	}()
	waitHandled := func(want ...string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			got := slices.Clone(handled)
			mu.Unlock()
			if slices.Equal(got, want) {
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("handled %v, want %v", handled, want)
	}
	publishEvent(t, admin, "decky.h.lifecycle", "a")
	waitHandled("a")
	ns.Stop()
	time.Sleep(2 * time.Second)
	ns.StartAgain()
	for !nc.IsConnected() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	publishEvent(t, admin, "decky.h.lifecycle", "b")
	waitHandled("a", "b")
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
