package eventbus_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
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
	js, err := eventbus.Open(ctx, nc, events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := eventbus.NewBucket[events.NodeRecord](ctx, js, events.BucketNodes)
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
	js, err := eventbus.Open(ctx, nc, events.Planner, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	heal := &eventbus.Healer{JS: js, ID: events.Planner, Replicas: 1}
	pub := &eventbus.Publisher{JS: js, NC: nc, Source: "test", Heal: heal.Heal}
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

// The planner reads the executor's node records of a past workflow in one
// pass (a fleet's run is read in one watch, not one read per node): every
// record of that workflow, nothing of another, no deleted key, and a
// record that does not decode reported by key without failing the read.
func TestEntriesOfAWorkflowOnJetStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	jsExec, err := eventbus.Open(ctx, ns.Connect(events.Executor), events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := eventbus.NewBucket[events.NodeRecord](ctx, jsExec, events.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	const id, other = "0197a000-0000-7000-8000-000000000001", "0197a000-0000-7000-8000-000000000002"
	want := map[string]events.NodeRecord{}
	for i := range 300 {
		k := events.NodeKey(id, dag.OpCreate, fmt.Sprintf("app-h%03d", i), "conf")
		want[k] = events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 1, SpecHash: fmt.Sprint("sha256:", i)}
		if _, err := store.Put(ctx, k, want[k], 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Put(ctx, events.NodeKey(other, dag.OpCreate, "app-h000", "conf"), events.NodeRecord{Status: dag.NodeFailed}, 0); err != nil {
		t.Fatal(err)
	}
	gone := events.NodeKey(id, dag.OpDelete, "app-h000", "conf")
	if _, err := store.Put(ctx, gone, events.NodeRecord{Status: dag.NodeSucceeded}, 0); err != nil {
		t.Fatal(err)
	}
	if err := store.KV.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	damaged := events.NodeKey(id, dag.OpCreate, "app-h999", "conf")
	if _, err := store.KV.Put(ctx, damaged, []byte("\x00 not a record")); err != nil {
		t.Fatal(err)
	}
	jsPlanner, err := eventbus.Open(ctx, ns.Connect(events.Planner), events.Planner, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	read, err := eventbus.NewBucket[events.NodeRecord](ctx, jsPlanner, events.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	got, bad, err := read.Entries(ctx, id+".>")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Fatalf("%s: got %+v, want %+v", k, got[k], v)
		}
	}
	if len(bad) != 1 || !errors.Is(bad[damaged], events.ErrBadRecord) {
		t.Fatalf("damaged records %v, want %s only", bad, damaged)
	}
	none, bad, err := read.Entries(ctx, "0197a000-0000-7000-8000-000000000003.>")
	if err != nil || len(none) != 0 || len(bad) != 0 {
		t.Fatalf("no records: %v %v %v", none, bad, err)
	}
	// The bucket's revision, as the planner reads it: what was written
	// is at or below it, what is written next above.
	before, err := read.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, rev, err := read.Get(ctx, damaged); rev > before || !errors.Is(err, events.ErrBadRecord) {
		t.Fatalf("the last record written is at %d, after the bucket's revision %d (%v)", rev, before, err)
	}
	next, err := store.Put(ctx, events.NodeKey(other, dag.OpCreate, "app-h001", "conf"), events.NodeRecord{Status: dag.NodeSucceeded}, 0)
	if err != nil || next <= before {
		t.Fatalf("a record written next is at %d, not after %d: %v", next, before, err)
	}
	if after, err := read.Revision(ctx); err != nil || after != next {
		t.Fatalf("revision %d after a write at %d: %v", after, next, err)
	}
}

// Absent asks the stream's leader, with the executor's permissions, and
// tells a record there from one never written or deleted since.
func TestBucketAbsentAsksTheLeader(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	jsPlanner, err := eventbus.Open(ctx, ns.Connect(events.Planner), events.Planner, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	jsExec, err := eventbus.Open(ctx, ns.Connect(events.Executor), events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	write, err := eventbus.NewBucket[events.RunSnapshot](ctx, jsPlanner, events.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	read, err := eventbus.NewBucket[events.RunSnapshot](ctx, jsExec, events.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	absent := func(want bool, when string) {
		t.Helper()
		got, err := read.Absent(ctx, "w1")
		if err != nil || got != want {
			t.Fatalf("%s: absent %v, %v; want %v", when, got, err, want)
		}
	}
	absent(true, "never written")
	if _, err := write.Put(ctx, "w1", events.RunSnapshot{Generation: 1}, 0); err != nil {
		t.Fatal(err)
	}
	absent(false, "written")
	if err := write.KV.Delete(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	absent(true, "deleted")
	if _, err := write.Put(ctx, "w1", events.RunSnapshot{Generation: 2}, 0); err != nil {
		t.Fatal(err)
	}
	if err := write.KV.Purge(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	absent(true, "purged")
}
