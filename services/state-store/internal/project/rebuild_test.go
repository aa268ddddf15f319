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
