package events_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream adapters against a real server, as the executor uses them:
// a missing record, a changed one and a damaged one are told apart.
func TestBucketOnJetStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	nc := ns.Connect(events.Executor)
	js, err := events.Open(ctx, nc, events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := events.NewBucket[events.NodeRecord](ctx, js, events.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx, "w.create.f.n"); !errors.Is(err, events.ErrNoRecord) {
		t.Fatalf("get of nothing: %v", err)
	}
	rev, err := b.Put(ctx, "w.create.f.n", events.NodeRecord{Status: dag.NodeRunning, Attempt: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "w.create.f.n", events.NodeRecord{Status: dag.NodeRunning}, 0); !errors.Is(err, events.ErrChanged) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := b.Put(ctx, "w.create.f.n", events.NodeRecord{Status: dag.NodeFailed}, rev+7); !errors.Is(err, events.ErrChanged) {
		t.Fatalf("stale compare-and-set: %v", err)
	}
	if _, err := b.Put(ctx, "w.create.f.n", events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 1}, rev); err != nil {
		t.Fatal(err)
	}
	got, _, err := b.Get(ctx, "w.create.f.n")
	if err != nil || got.Status != dag.NodeSucceeded {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := b.KV.Put(ctx, "w.create.f.bad", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, rev, err := b.Get(ctx, "w.create.f.bad"); !errors.Is(err, events.ErrBadRecord) || rev == 0 {
		t.Fatalf("damaged record: rev %d, %v", rev, err)
	}
	keys, err := b.Keys(ctx, "w.create.>")
	if err != nil || !slices.Equal(keys, []string{"w.create.f.n", "w.create.f.bad"}) {
		t.Fatalf("keys %v %v", keys, err)
	}
}

// An outbox stores its events in order, each message id once, and a
// publish that failed (its stream gone) is sent again by Flush, which
// re-creates the stream.
func TestOutboxOnJetStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	nc := ns.Connect(events.Planner)
	js, err := events.Open(ctx, nc, events.Planner, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	heal := &events.Healer{JS: js, ID: events.Planner, Replicas: 1}
	pub := &events.Publisher{JS: js, NC: nc, Source: "test", Heal: heal.Heal}
	out := pub.Outbox()
	ev := func(i int) *events.WorkflowEvent {
		return &events.WorkflowEvent{Ref: events.Ref{WorkflowID: "w1", Workflow: "w", Operation: dag.OpCreate, Generation: 1},
			Status: dag.WorkflowRunning, Reason: fmt.Sprint(i)}
	}
	for i := range 300 { // past MaxOutboxPending
		out.Emit(ctx, events.WorkflowLifecycle("w1"), ev(i), fmt.Sprint("m", i))
	}
	out.Emit(ctx, events.WorkflowLifecycle("w1"), ev(0), "m0") // a duplicate
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(ctx, t, js); n != 300 {
		t.Fatalf("stream holds %d events, want 300", n)
	}
	admin := ns.Connect(busauth.Admin)
	ajs, _ := jetstream.New(admin)
	if err := ajs.DeleteStream(ctx, events.StreamEvents); err != nil {
		t.Fatal(err)
	}
	out.Emit(ctx, events.WorkflowLifecycle("w1"), ev(1000), "m1000")
	if err := out.Flush(ctx); err != nil {
		t.Fatalf("flush after the stream was deleted: %v", err)
	}
	if n := streamMsgs(ctx, t, js); n != 1 {
		t.Fatalf("re-created stream holds %d events, want 1", n)
	}
}

func streamMsgs(ctx context.Context, t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
