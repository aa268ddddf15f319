package formula

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A dispatch whose first delivery published its events but could not
// record a node's outcome is delivered again after the event stream's
// duplicate window (a NATS outage in between, say). The redelivery
// publishes what it decides again under the same message ids, and
// JetStream no longer drops them as duplicates: it looks for each in the
// stream first, so the stream holds each transition once, in order.
func TestRedeliveryAfterTheDuplicateWindowStoresEachEventOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const window = time.Second
	ns := natstest.Start(t)
	admin := eventStream(ctx, t, ns, window)
	nc := ns.Connect(events.Executor)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness()
	h.x.Bus = NewBus(&eventbus.Publisher{JS: js, NC: nc, Source: "executor/test"})
	d := dispatch(dag.OpCreate, 1, node("a", "run-a", 1), node("b", "run-b", 1, "a"))
	var mu sync.Mutex
	puts := 0
	h.records.Fail = func(op, key string) error {
		mu.Lock()
		defer mu.Unlock()
		if op == "put" && key == h.key(dag.OpCreate, "b") {
			if puts++; puts == 2 { // b's outcome, in the first delivery
				return errors.New("the bucket does not answer")
			}
		}
		return nil
	}
	env, err := events.NewAt("d1", "planner/test", time.Now().UTC(), d)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.x.Handle(ctx, &consume.Event{Envelope: env, Delivered: 1}); err == nil {
		t.Fatal("the first delivery recorded b's outcome")
	}
	time.Sleep(2 * window)
	if err := h.x.Handle(ctx, &consume.Event{Envelope: env, Delivered: 2}); err != nil {
		t.Fatal(err)
	}
	got := storedEvents(ctx, t, admin)
	want := "[f running a running a succeeded b running b succeeded f succeeded]"
	if fmt.Sprint(got) != want {
		t.Fatalf("stream holds %v, want %s", got, want)
	}
	if got := h.host.scripts(); len(got) != 2 {
		t.Fatalf("ran %v", got)
	}
}

// eventStream creates the event stream with a duplicate window of window,
// as an administrator, and returns the administrator's JetStream.
func eventStream(ctx context.Context, t *testing.T, ns *natstest.Server, window time.Duration) jetstream.JetStream {
	t.Helper()
	admin, err := jetstream.New(ns.Connect(busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range eventbus.Streams(1) {
		if cfg.Name == events.StreamEvents {
			cfg.Duplicates = window
			if _, err := admin.CreateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	return admin
}

// storedEvents describes the event stream's node and formula events, in
// order: "a running", "f succeeded".
func storedEvents(ctx context.Context, t *testing.T, admin jetstream.JetStream) []string {
	t.Helper()
	st, err := admin.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, nats.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, ev, err := events.Decode[events.NodeEvent](m.Data); err == nil && ev.Node != "" {
			out = append(out, ev.Node+" "+string(ev.Status))
		} else if _, ev, err := events.Decode[events.FormulaEvent](m.Data); err == nil {
			out = append(out, "f "+string(ev.Status))
		}
	}
}
