package events_test

import (
	"testing"
	"time"

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
		ctx, cancel := events.HandlerContext(micro.Headers{events.WaitHeader: {tc.wait}}, tc.limit)
		d, _ := ctx.Deadline()
		if got := time.Until(d); got > tc.want || got < tc.want-time.Second {
			t.Errorf("wait %q, limit %v: the handler has %v, want %v", tc.wait, tc.limit, got, tc.want)
		}
		cancel()
	}
}

func TestStateRetry(t *testing.T) {
	for in, want := range map[string]string{
		events.StateWorkflow: "state.retry.workflow", events.StateList: "state.retry.list",
		events.StateHost: "state.retry.host", events.StateDrift: "state.retry.drift",
		events.StateRebuild: "", events.SubjectSubmit: "", "workflow.w1.cancel": "",
	} {
		if got := events.StateRetry(in); got != want {
			t.Errorf("StateRetry(%q) = %q, want %q", in, got, want)
		}
	}
}
