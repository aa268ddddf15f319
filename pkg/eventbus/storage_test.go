package eventbus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Which errors of a JetStream write count as storage trouble, and the
// cause each is named with.
func TestStorageCause(t *testing.T) {
	api := func(code jetstream.ErrorCode, status int, desc string) error {
		return fmt.Errorf("write gantry_nodes/k: %w", &jetstream.APIError{Code: status, ErrorCode: code, Description: desc})
	}
	for _, c := range []struct {
		name      string
		err       error
		connected bool
		waited    time.Duration
		cause     string // "" when not storage trouble
	}{
		{"nil", nil, true, 0, ""},
		{"insufficient resources", api(10023, 503, "insufficient resources"), true, 0, "insufficient resources"},
		{"storage resources exceeded", api(10047, 500, "insufficient storage resources available"), true, 0, "insufficient storage"},
		{"memory resources exceeded", api(10028, 500, "insufficient memory resources available"), true, 0, "insufficient memory"},
		{"account limit", api(10002, 400, "resource limits exceeded for account"), true, 0, "the account's storage limit is reached"},
		{"store failed", api(10077, 503, "maximum bytes exceeded"), true, 0, "the store refused it: maximum bytes exceeded"},
		{"store failed, message too large", api(10077, 400, "message size exceeds maximum allowed"), true, 0, ""},
		{"purge on a full disk", api(10051, 500, "write /js/KV_gantry_slots/msgs/1.blk: no space left on device"), true, 0, "no space left on device"},
		{"plain disk full", errors.New("write x.blk: no space left on device"), false, 0, "no space left on device"},
		{"wrong last sequence", api(10071, 400, "wrong last sequence: 4"), true, 0, ""},
		{"stream not found", api(10059, 404, "stream not found"), true, 0, ""},
		{"server error", api(10008, 500, "jetstream cluster not available"), true, 0, ""},
		{"no answer while connected", fmt.Errorf("publish: %w", context.DeadlineExceeded), true, 5 * time.Second, eventbus.StorageCauseNoAnswer},
		{"nats timeout while connected", nats.ErrTimeout, true, 2 * time.Second, eventbus.StorageCauseNoAnswer},
		{"async publish timeout", jetstream.ErrAsyncPublishTimeout, true, 5 * time.Second, eventbus.StorageCauseNoAnswer},
		{"no answer while disconnected", context.DeadlineExceeded, false, 5 * time.Second, ""},
		{"the caller's own short deadline", context.DeadlineExceeded, true, 100 * time.Millisecond, ""},
		{"cancelled", context.Canceled, true, 5 * time.Second, ""},
		{"no responders", nats.ErrNoResponders, true, 5 * time.Second, ""},
		{"no stream answers", jetstream.ErrNoStreamResponse, true, 5 * time.Second, ""},
		{"connection closed", nats.ErrConnectionClosed, true, 5 * time.Second, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cause, ok := eventbus.StorageCause(c.err, c.connected, c.waited)
			if ok != (c.cause != "") || cause != c.cause {
				t.Errorf("StorageCause(%v, connected %v, waited %s) = %q, %v; want %q", c.err, c.connected, c.waited, cause, ok, c.cause)
			}
		})
	}
}

// A stream's episode of storage trouble is logged once when it starts and
// once when a write succeeds again, is in the status meanwhile, and its
// failures come back as StorageErrors that wrap the original.
func TestStorageEpisodes(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := &countingMetrics{troubled: map[string]bool{}}
	st := &eventbus.Storage{Log: slog.New(slog.NewTextHandler(&buf, nil)), Now: func() time.Time { return now }, Metrics: m}
	if s := st.Status(); !s.OK || len(s.Problems) != 0 {
		t.Fatalf("status before any write: %+v", s)
	}
	full := &jetstream.APIError{Code: 500, ErrorCode: 10047, Description: "insufficient storage resources available"}
	for i := 0; i < 5; i++ {
		err := st.Observe(events.StreamEvents, now.Add(-10*time.Millisecond), full)
		if !eventbus.IsStorage(err) || !errors.Is(err, full) {
			t.Fatalf("failure %d: %v is not a StorageError wrapping the API error", i, err)
		}
		if want := "JetStream cannot store on GANTRY_EVENTS: insufficient storage"; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %q, want it to start %q", err, want)
		}
		now = now.Add(time.Second)
	}
	other := errors.New("wrong last sequence")
	if err := st.Observe("gantry_runs", now, other); err != other {
		t.Errorf("another error came back as %v", err)
	}
	s := st.Status()
	if s.OK || len(s.Problems) != 1 {
		t.Fatalf("status while failing: %+v", s)
	}
	if p := s.Problems[0]; p.Stream != events.StreamEvents || p.Cause != "insufficient storage" || p.Failures != 5 || !p.Since.Equal(now.Add(-5*time.Second)) {
		t.Errorf("problem %+v", p)
	}
	if err := st.Observe(events.StreamEvents, now, nil); err != nil {
		t.Fatal(err)
	}
	if s := st.Status(); !s.OK {
		t.Errorf("status after a write went through: %+v", s)
	}
	logs := buf.String()
	if n := strings.Count(logs, "JetStream cannot store on GANTRY_EVENTS: insufficient storage"); n != 1 {
		t.Errorf("the episode's start logged %d times:\n%s", n, logs)
	}
	if n := strings.Count(logs, "JetStream stores on GANTRY_EVENTS again"); n != 1 || !strings.Contains(logs, "after=5s") {
		t.Errorf("the episode's end logged %d times (want once, after=5s):\n%s", n, logs)
	}
	if m.failed[events.StreamEvents] != 5 || m.troubled[events.StreamEvents] || m.changes != 2 {
		t.Errorf("metrics: %+v", m)
	}
}

// A problem whose stream nobody writes to any more is not reported for
// ever.
func TestStorageForgetsAStreamNobodyWrites(t *testing.T) {
	now := time.Now()
	st := &eventbus.Storage{Log: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), Now: func() time.Time { return now }}
	_ = st.Observe("gantry_slots", now.Add(-5*time.Second), context.DeadlineExceeded)
	if st.Status().OK {
		t.Fatal("a timeout while connected is not reported")
	}
	now = now.Add(eventbus.StorageForget)
	if s := st.Status(); !s.OK {
		t.Errorf("still reported after %s without a write: %+v", eventbus.StorageForget, s)
	}
}

type countingMetrics struct {
	failed   map[string]int
	troubled map[string]bool
	changes  int
}

func (m *countingMetrics) Failed(stream, _ string) {
	if m.failed == nil {
		m.failed = map[string]int{}
	}
	m.failed[stream]++
}

func (m *countingMetrics) Troubled(stream string, troubled bool) {
	m.troubled[stream] = troubled
	m.changes++
}

// failingJS is a JetStream whose publishes all fail for reasons of
// storage.
type failingJS struct {
	jetstream.JetStream
	calls int
}

func (f *failingJS) PublishMsg(context.Context, *nats.Msg, ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	f.calls++
	return nil, &eventbus.StorageError{Stream: events.StreamEvents, Cause: eventbus.StorageCauseNoAnswer, Err: context.DeadlineExceeded}
}

// Once its service is stopping, a publish JetStream cannot store is not
// tried again (a drain must not wait for a full disk).
func TestPublishGivesUpStorageWhenStopping(t *testing.T) {
	js := &failingJS{}
	p := &eventbus.Publisher{JS: js, Source: "executor/t"}
	stopping := make(chan struct{})
	close(stopping)
	ctx := eventbus.WithStopping(context.Background(), stopping)
	ref := events.Ref{WorkflowID: "0b5c3a52-4f0c-4c51-9d0e-7a4d2f9e8a11", Workflow: "wuji", Formula: "cp-containerd", Host: "cp-0", Node: "containerd", Operation: dag.OpCreate, Generation: 1}
	err := p.Publish(ctx, events.HostLifecycle("h1"), &events.NodeEvent{Ref: ref, Status: "running"}, "m1")
	if !eventbus.IsStorage(err) {
		t.Fatalf("publish: %v, want the storage error", err)
	}
	if js.calls != 1 {
		t.Errorf("tried %d times while stopping, want once", js.calls)
	}
}

// An asynchronous publish nobody answers (JetStream does not answer a
// write it cannot store) fails after AsyncPublishTimeout instead of
// waiting for ever: unanswered publishes must not pile up to the client's
// limit and refuse every later one.
func TestUnansweredAsyncPublishesFail(t *testing.T) {
	old := eventbus.AsyncPublishTimeout
	eventbus.AsyncPublishTimeout = 300 * time.Millisecond
	t.Cleanup(func() { eventbus.AsyncPublishTimeout = old })
	ns := natstest.Start(t)
	nc := ns.Connect(busauth.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := eventbus.Open(ctx, nc, events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A plain subscriber that never answers: the publish is received, so
	// not refused for want of responders, and never acknowledged.
	if _, err := nc.Subscribe("silent.x", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	f, err := js.PublishMsgAsync(&nats.Msg{Subject: "silent.x", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.Err():
		if cause, ok := eventbus.StorageCause(err, true, time.Second); !ok {
			t.Errorf("the publish failed with %v, not taken for storage trouble (%q)", err, cause)
		}
	case <-f.Ok():
		t.Fatal("acknowledged by nobody")
	case <-time.After(5 * time.Second):
		t.Fatal("an unanswered asynchronous publish still waits after 5s")
	}
	if n := js.PublishAsyncPending(); n != 0 {
		t.Errorf("%d asynchronous publishes still pending", n)
	}
}
