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

// The planner reads a composition's records on every host of the
// state-store's per-host projection in one pass (a fleet is accepted in
// one read, not one per host): a wildcard over hosts, nothing of another
// composition, no deleted key.
func TestEntriesAcrossHostsOnJetStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	jsStore, err := events.Open(ctx, ns.Connect(events.StateStore), events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := events.NewBucket[events.HostNode](ctx, jsStore, events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]events.HostNode{}
	for i := range 300 {
		host := fmt.Sprintf("h%03d", i)
		k := events.HostNodeKey(host, "web", "app-"+host, "conf")
		want[k] = events.HostNode{Host: host, Workflow: "web", Node: "conf", Status: dag.NodeSucceeded}
		if _, err := store.Put(ctx, k, want[k], 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Put(ctx, events.HostNodeKey("h000", "other", "app", "conf"), events.HostNode{Workflow: "other"}, 0); err != nil {
		t.Fatal(err)
	}
	gone := events.HostNodeKey("h999", "web", "app-h999", "conf")
	if _, err := store.Put(ctx, gone, events.HostNode{Workflow: "web"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := store.KV.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	jsPlanner, err := events.Open(ctx, ns.Connect(events.Planner), events.Planner, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	read, err := events.NewBucket[events.HostNode](ctx, jsPlanner, events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	got, err := read.Entries(ctx, events.HostWorkflowPrefix("*", "web")+">")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k].Host != v.Host || got[k].Status != v.Status {
			t.Fatalf("%s: got %+v, want %+v", k, got[k], v)
		}
	}
	none, err := read.Entries(ctx, events.HostWorkflowPrefix("*", "nothing")+">")
	if err != nil || len(none) != 0 {
		t.Fatalf("no records: %v %v", none, err)
	}
}

func TestMemoryBucketFilters(t *testing.T) {
	t.Parallel()
	m := &events.MemoryBucket[string]{}
	for _, k := range []string{"host.a.web.app.x", "host.b.web.app.y", "host.a.other.app.x", "host.a.web", "hostx.a.web.app.x"} {
		m.Set(k, k)
	}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"", []string{"host.a.other.app.x", "host.a.web", "host.a.web.app.x", "host.b.web.app.y", "hostx.a.web.app.x"}},
		{"host.*.web.>", []string{"host.a.web.app.x", "host.b.web.app.y"}},
		{"host.a.>", []string{"host.a.other.app.x", "host.a.web", "host.a.web.app.x"}},
		{"host.*.web", []string{"host.a.web"}},
		{"host.a.web.app.x", []string{"host.a.web.app.x"}},
		{"host.*.*.app.*", []string{"host.a.other.app.x", "host.a.web.app.x", "host.b.web.app.y"}},
		{"host.c.>", nil},
	} {
		keys, err := m.Keys(context.Background(), tc.filter)
		if err != nil || !slices.Equal(keys, tc.want) {
			t.Errorf("Keys(%q) = %v %v, want %v", tc.filter, keys, err, tc.want)
		}
		if tc.filter == "" {
			continue
		}
		entries, err := m.Entries(context.Background(), tc.filter)
		if err != nil || len(entries) != len(tc.want) {
			t.Errorf("Entries(%q) = %v %v, want %v", tc.filter, entries, err, tc.want)
		}
		for _, k := range tc.want {
			if entries[k] != k {
				t.Errorf("Entries(%q)[%s] = %q", tc.filter, k, entries[k])
			}
		}
	}
}
