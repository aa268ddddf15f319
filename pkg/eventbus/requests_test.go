package eventbus_test

import (
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/micro"
)

// A handler gives up at its own limit, or before the requester does.
func TestHandlerContext(t *testing.T) {
	for _, tc := range []struct {
		wait  string
		limit time.Duration
		want  time.Duration
	}{
		{"", 5 * time.Second, 5 * time.Second},
		{"30s", 5 * time.Second, 5 * time.Second},
		{"2s", 5 * time.Second, 1800 * time.Millisecond},
		{"soon", 5 * time.Second, 5 * time.Second},
		{"-1s", 5 * time.Second, 5 * time.Second},
	} {
		ctx, cancel := eventbus.HandlerContext(micro.Headers{events.WaitHeader: {tc.wait}}, tc.limit)
		d, _ := ctx.Deadline()
		if got := time.Until(d); got > tc.want || got < tc.want-time.Second {
			t.Errorf("wait %q, limit %v: the handler has %v, want %v", tc.wait, tc.limit, got, tc.want)
		}
		cancel()
	}
}

func TestIsRequest(t *testing.T) {
	for reply, want := range map[string]bool{
		"_INBOX.abc":                             true,  // a client's request
		"_INBOX_planner.abc":                     true,  // a service's request
		"_R_.xyz.abc":                            true,  // a request across accounts
		"":                                       false, // a publish, an idle heartbeat
		"$JS.ACK.GANTRY_EVENTS.push.1.2.3.4.5.0": false, // a push consumer's delivery
		"$JS.FC.GANTRY_LOGS.x.y":                 false, // flow control
	} {
		if got := eventbus.IsRequest(reply); got != want {
			t.Errorf("IsRequest(%q) = %v, want %v", reply, got, want)
		}
	}
}
