package eventbus_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An outbox that lives as long as its service (the planner's, one for
// every unit of work) keeps no look-up from an earlier unit: once a unit
// done again (Recheck) is over, an event of a later unit that was never
// sent (emitted while the connection was down) is sent without reading
// what other services stored on its subject since that earlier unit.
func TestOutboxForgetsAnEarlierUnitsLookups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	admin, err := jetstream.New(ns.Connect(busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	eventStream(ctx, t, admin, 1, eventbus.DuplicateWindow)
	nc := serviceConn(t, ns.Keys, ns.URL(), events.Planner)
	pub := &eventbus.Publisher{JS: jsOf(t, nc), NC: nc, Source: "planner/test"}
	out := pub.Outbox()
	run := formulaRun(1)
	subject := run[0].subject

	// A unit done again (a redelivered batch): its event is looked for.
	out.Recheck(time.Now())
	out.Emit(ctx, subject, run[0].pl, run[0].msgID)
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	out.Recheck(time.Time{})

	// Other services store many events on the subject meanwhile.
	const others = 2000
	for i := range others {
		if _, err := admin.PublishAsync(subject, []byte(`{}`), jetstream.WithMsgID(fmt.Sprint("other-", i))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-admin.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the other events were not stored")
	}

	// A later unit: its event, emitted while the connection is down, is
	// not sent then; Flush sends it once the server is back.
	ns.Stop()
	for nc.IsConnected() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	out.Emit(ctx, subject, run[1].pl, run[1].msgID)
	ns.StartAgain()
	for !nc.IsConnected() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	watcher := ns.Connect(busauth.Admin)
	var gets atomic.Int64
	if _, err := watcher.Subscribe("$JS.API.STREAM.MSG.GET."+events.StreamEvents, func(*nats.Msg) { gets.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the later unit's flush: %d message gets, %.2fs", gets.Load(), took.Seconds())
	if n := gets.Load(); n > 0 {
		t.Fatalf("the later unit's event, never sent before, cost %d message gets (%.2fs): the earlier unit's look-up was read on through the %d events stored since", n, took.Seconds(), others)
	}
	st, err := admin.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if got := label(t, m.Data); got != "n0 running" {
		t.Fatalf("last event on %s: %q, want the later unit's n0 running", subject, got)
	}
}
