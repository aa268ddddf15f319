package project

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// On a NATS cluster, a node that has just started again answers no
// JetStream API request for a while: a rebuild waits for it instead of
// failing; any other error, or no responders for too long, is returned.
func TestRetryNoResponders(t *testing.T) {
	defer func(n int, d time.Duration) { noResponderTries, noResponderPause = n, d }(noResponderTries, noResponderPause)
	noResponderTries, noResponderPause = 4, time.Millisecond
	ctx := context.Background()
	calls := 0
	err := retryNoResponders(ctx, func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("replay: %w", nats.ErrNoResponders)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("transient no responders: err %v after %d calls, want nil after 3", err, calls)
	}
	other := errors.New("stream not found")
	calls = 0
	if err := retryNoResponders(ctx, func() error { calls++; return other }); err != other || calls != 1 {
		t.Fatalf("other error: %v after %d calls, want it after 1", err, calls)
	}
	calls = 0
	err = retryNoResponders(ctx, func() error { calls++; return nats.ErrNoResponders })
	if !errors.Is(err, nats.ErrNoResponders) || calls != 4 {
		t.Fatalf("lasting no responders: %v after %d calls, want it after 4", err, calls)
	}
}

// A summary is the same document whatever page count it keeps (the live
// one keeps what its documents were placed by, a replay has its own); any
// other difference counts.
func TestSameDocumentLeavesOutThePageCount(t *testing.T) {
	for _, c := range []struct {
		key, a, b string
		same      bool
	}{
		{"wf.w", `{"workflow_id":"w","pages":16}`, `{"workflow_id":"w","pages":1}`, true},
		{"wf.w", `{"workflow_id":"w"}`, `{"workflow_id":"w","pages":1}`, true},
		{"wf.w", `{"workflow_id":"w","status":"running","pages":1}`, `{"workflow_id":"w","status":"succeeded","pages":1}`, false},
		{"wf.w.f", `{"status":"ready","pages":1}`, `{"status":"ready","pages":2}`, false},
		{"host.h.c.f.n", `{"pages":1}`, `{"pages":2}`, false},
	} {
		if got := sameDocument(c.key, []byte(c.a), []byte(c.b)); got != c.same {
			t.Errorf("%s: %s and %s the same: %v, want %v", c.key, c.a, c.b, got, c.same)
		}
	}
}
