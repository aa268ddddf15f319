package project_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// The document store contract: project.KVStore on a real JetStream server
// (auth on, as the state-store opens gantry_state) and project.MemStore,
// which a replay builds into and the projector tests run on, answer
// alike.

// documents is what the contract asks of a store: the projector's port
// and the reads the state.* endpoints make (api.Documents).
type documents interface {
	project.Store
	Keys(ctx context.Context, filter string) ([]string, error)
	Values(ctx context.Context, filter string) (map[string][]byte, error)
}

// documentStores are the stores the contract holds: KVStore and
// MemStore, and Pages (what the state-store keeps its projection in) over
// each.
func documentStores(t *testing.T, ctx context.Context) map[string]documents {
	return map[string]documents{"jetstream": kvStore(t, ctx), "memory": project.NewMemStore(),
		"pages on jetstream": &project.Pages{Raw: kvStore(t, ctx)}, "pages in memory": &project.Pages{Raw: project.NewMemStore()}}
}

// kvStore is a KVStore on gantry_state of a server of its own.
func kvStore(t *testing.T, ctx context.Context) *project.KVStore {
	ns := natstest.Start(t)
	js, err := eventbus.Open(ctx, ns.Connect(events.StateStore), events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	return &project.KVStore{JS: js, KV: kv}
}

func storeContract(t *testing.T, run func(t *testing.T, ctx context.Context, s documents)) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, s := range documentStores(t, ctx) {
		t.Run(name, func(t *testing.T) { run(t, ctx, s) })
	}
}

// put writes key over rev and returns the new revision.
func put(t *testing.T, ctx context.Context, s documents, key, val string, rev uint64) uint64 {
	t.Helper()
	ws := []project.Write{{Key: key, Val: []byte(val), Rev: rev}}
	s.PutAll(ctx, ws)
	if ws[0].Err != nil || ws[0].NewRev == 0 {
		t.Fatalf("write %s over %d: revision %d, %v", key, rev, ws[0].NewRev, ws[0].Err)
	}
	return ws[0].NewRev
}

func value(t *testing.T, ctx context.Context, s documents, key string) (string, uint64) {
	t.Helper()
	b, rev, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(b), rev
}

func TestStoreWrites(t *testing.T) {
	storeContract(t, func(t *testing.T, ctx context.Context, s documents) {
		// A summary, and a node's document (which Pages keeps in a page).
		for _, k := range []struct{ a, b string }{{"wf.a", "wf.b"}, {"wf.p.f.a", "wf.p.g.b"}} {
			storeWrites(t, ctx, s, k.a, k.b)
		}
	})
}

func storeWrites(t *testing.T, ctx context.Context, s documents, a, b string) {
	if b, rev, err := s.Get(ctx, a+"none"); b != nil || rev != 0 || err != nil {
		t.Fatalf("get of nothing: %q at %d, %v", b, rev, err)
	}
	rev := put(t, ctx, s, a, `{"v":1}`, 0)
	if v, at := value(t, ctx, s, a); v != `{"v":1}` || at != rev {
		t.Fatalf("created: %s at %d, want at %d", v, at, rev)
	}
	// One flush: a create over a document, a stale compare-and-set and
	// a good one each get their own answer.
	ws := []project.Write{
		{Key: a, Val: []byte(`{"v":"create again"}`)},
		{Key: a, Val: []byte(`{"v":"stale"}`), Rev: rev + 100},
		{Key: b, Val: []byte(`{"v":"new"}`)},
	}
	s.PutAll(ctx, ws)
	if ws[0].Err == nil || ws[1].Err == nil || ws[2].Err != nil || ws[2].NewRev == 0 {
		t.Fatalf("answers: create again %v, stale %v, new %d %v", ws[0].Err, ws[1].Err, ws[2].NewRev, ws[2].Err)
	}
	if v, at := value(t, ctx, s, a); v != `{"v":1}` || at != rev {
		t.Fatalf("a refused write changed %s: %s at %d", a, v, at)
	}
	next := put(t, ctx, s, a, `{"v":2}`, rev)
	if v, at := value(t, ctx, s, a); v != `{"v":2}` || at != next || next <= rev {
		t.Fatalf("compare-and-set: %s at %d (after %d)", v, at, rev)
	}
}

// A mark is stored without a wait, then read as any document.
func TestStoreMark(t *testing.T) {
	storeContract(t, func(t *testing.T, ctx context.Context, s documents) {
		for _, v := range []string{"7", "9"} {
			if err := s.Mark(ctx, project.CheckpointKey, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, rev, err := s.Get(ctx, project.CheckpointKey)
			if err == nil && string(b) == "9" && rev > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("mark not stored: %q at %d, %v", b, rev, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// RemoveWorkflow removes a workflow's documents and nothing else, leaves
// nothing behind (a create of the key works again), and removing what is
// gone is no error.
func TestStoreRemoveWorkflow(t *testing.T) {
	storeContract(t, func(t *testing.T, ctx context.Context, s documents) {
		for _, k := range []string{"wf.a", "wf.a.f", "wf.a.f.n", "wf.ab", "wf.ab.f", "wf.b.f.n", "host.h1.web.f.n"} {
			put(t, ctx, s, k, `{}`, 0)
		}
		if err := s.RemoveWorkflow(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"wf.a", "wf.a.f", "wf.a.f.n"} {
			if b, rev, err := s.Get(ctx, k); b != nil || rev != 0 || err != nil {
				t.Errorf("%s after its workflow was removed: %q at %d, %v", k, b, rev, err)
			}
		}
		for _, k := range []string{"wf.ab", "wf.ab.f", "wf.b.f.n", "host.h1.web.f.n"} {
			if v, _ := value(t, ctx, s, k); v != `{}` {
				t.Errorf("%s went with workflow a", k)
			}
		}
		put(t, ctx, s, "wf.a", `{"again":true}`, 0)
		if err := s.RemoveWorkflow(ctx, "gone"); err != nil {
			t.Fatalf("removing a workflow with no documents: %v", err)
		}
	})
}

// Remove leaves nothing of a key: not its value, nor a delete marker
// (the bucket holds only what was not removed).
func TestStoreRemove(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := kvStore(t, ctx)
	for name, s := range map[string]interface {
		documents
		Remove(ctx context.Context, key string) error
	}{"jetstream": kv, "memory": project.NewMemStore()} {
		put(t, ctx, s, "wf-doc.w.1", `"gone"`, 0)
		put(t, ctx, s, "wf-doc.w.2", `"kept"`, 0)
		if err := s.Remove(ctx, "wf-doc.w.1"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b, rev, err := s.Get(ctx, "wf-doc.w.1"); b != nil || rev != 0 || err != nil {
			t.Errorf("%s: removed: %s at %d, %v", name, b, rev, err)
		}
		if v, _ := value(t, ctx, s, "wf-doc.w.2"); v != `"kept"` {
			t.Errorf("%s: the other key: %s", name, v)
		}
	}
	st, err := kv.KV.Status(ctx)
	if err != nil || st.Values() != 1 {
		t.Errorf("the bucket holds %d messages after a remove (%v), want 1", st.Values(), err)
	}
}

// The reads the state.* endpoints make: keys by filter, values by filter
// in one pass.
func TestStoreReads(t *testing.T) {
	storeContract(t, func(t *testing.T, ctx context.Context, s documents) {
		if keys, err := s.Keys(ctx, "wf.*"); len(keys) != 0 || err != nil {
			t.Fatalf("keys of an empty store: %v %v", keys, err)
		}
		docs := map[string]string{"wf.a": "A", "wf.a.f": "F", "wf.a.f.n": "N", "wf.b": "B", "host.h1.web.f.n": "H"}
		for k, v := range docs {
			put(t, ctx, s, k, `"`+v+`"`, 0)
		}
		for filter, want := range map[string][]string{
			"wf.*":       {"wf.a", "wf.b"},
			"wf.a.>":     {"wf.a.f", "wf.a.f.n"},
			"host.h1.>":  {"host.h1.web.f.n"},
			"host.h2.>":  nil,
			"wf.a.f.*":   {"wf.a.f.n"},
			"wf.c.f.n.x": nil,
		} {
			keys, err := s.Keys(ctx, filter)
			slices.Sort(keys)
			if err != nil || !slices.Equal(keys, want) {
				t.Errorf("Keys(%q) = %v %v, want %v", filter, keys, err, want)
			}
			vals, err := s.Values(ctx, filter)
			if err != nil || !slices.Equal(slices.Sorted(maps.Keys(vals)), want) {
				t.Errorf("Values(%q) = %v %v, want the values of %v", filter, vals, err, want)
			}
			for k, v := range vals {
				if string(v) != `"`+docs[k]+`"` {
					t.Errorf("Values(%q)[%s] = %s", filter, k, v)
				}
			}
		}
	})
}
