package eventbus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestTransient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("stream GANTRY_EVENTS: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("kv bucket gantry_runs: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{fmt.Errorf("stream GANTRY_EVENTS: %w", nats.ErrReconnectBufExceeded), true}, // a service's connection, down
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 500, Description: "error creating store for stream"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10074, Description: "replicas > 1 not supported in non-clustered mode"}, false},
		{fmt.Errorf("%w: is this process connected as the planner identity? %w", ErrRefused, context.DeadlineExceeded), false},
		{errors.New("something else"), false},
		{nil, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// Open tries again, logging each try, while the server cannot create the
// streams yet, and stops at once on an error that will not go away, or
// after the time it is given.
func TestEnsureWithRetry(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	tries := 0
	err := ensureWithRetry(context.Background(), func() error {
		tries++
		if tries < 3 {
			return fmt.Errorf("stream GANTRY_EVENTS: %w", context.DeadlineExceeded)
		}
		return nil
	}, time.Minute, log)
	if err != nil || tries != 3 {
		t.Fatalf("err %v after %d tries", err, tries)
	}
	if n := strings.Count(logs.String(), "cannot create the streams and buckets yet; trying again"); n != 2 {
		t.Fatalf("%d retries logged, want 2:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"tries":3`) {
		t.Fatalf("success not logged:\n%s", logs.String())
	}

	tries = 0
	bad := &jetstream.APIError{Code: 400, Description: "replicas > 1 not supported in non-clustered mode"}
	if err := ensureWithRetry(context.Background(), func() error { tries++; return bad }, time.Minute, log); !errors.Is(err, bad) || tries != 1 {
		t.Fatalf("a bad request: %v after %d tries", err, tries)
	}

	tries = 0
	start := time.Now()
	err = ensureWithRetry(context.Background(), func() error { tries++; return nats.ErrNoResponders }, 2*time.Second, log)
	if !errors.Is(err, nats.ErrNoResponders) || tries < 2 || time.Since(start) > 5*time.Second {
		t.Fatalf("bounded retry: %v after %d tries in %s", err, tries, time.Since(start))
	}
}

// A compare-and-set conflict is told apart from a failed write whichever
// form the server gives it: a single server's 10071, a replicated
// bucket's 10164 (raw, as KeyValue.Create passes it through after a
// conflict on a deleted key's marker, or as the client maps it).
func TestIsConflict(t *testing.T) {
	t.Parallel()
	single := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 7"}
	replicated := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{single, true},
		{replicated, true},
		{fmt.Errorf("take a slot: %w", replicated), true},
		{fmt.Errorf("%w: %w", replicated, jetstream.ErrKeyExists), true},
		{fmt.Errorf("%w: %w", replicated, jetstream.ErrKeyRevisionMismatch), true},
		{jetstream.ErrKeyExists, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008}, false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := IsConflict(c.err); got != c.want {
			t.Errorf("IsConflict(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
