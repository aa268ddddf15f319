package eventbus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// One event emitted while the outbox rechecks (an event an earlier unit
// may have stored, as the planner's accepted event published again), then
// events emitted without: the first is stored once, whether an earlier
// copy was stored (longer ago than the duplicate window) or not, and
// before the others.
func TestRecheckedEventThenOthers(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run(fmt.Sprint("stored before: ", stored), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ns := natstest.Start(t)
			admin, _ := jetstream.New(ns.Connect(busauth.Admin))
			eventStream(ctx, t, admin, 1, 200*time.Millisecond)
			nc := serviceConn(t, ns.Keys, ns.URL(), events.Planner)
			pub := &eventbus.Publisher{JS: jsOf(t, nc), NC: nc, Source: "planner/test"}
			out := pub.Outbox()
			run := formulaRun(2)
			t0 := time.Now()
			if stored {
				if err := pub.Publish(ctx, run[0].subject, run[0].pl, run[0].msgID); err != nil {
					t.Fatal(err)
				}
				time.Sleep(500 * time.Millisecond) // past the duplicate window
			}
			out.Recheck(t0)
			out.Emit(ctx, run[0].subject, run[0].pl, run[0].msgID)
			out.Recheck(time.Time{})
			for _, tr := range run[1:] {
				out.Emit(ctx, tr.subject, tr.pl, tr.msgID)
			}
			if err := out.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			got, want := storedLabels(ctx, t, admin), labels(t, pub, run)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("stored %q, want %q", got, want)
			}
		})
	}
}
