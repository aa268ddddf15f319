package eventbustest_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
)

// The record store contract: eventbus.Bucket on a real JetStream server
// (auth on, as the executor opens it) and eventbustest.MemoryBucket, which
// the services' tests use in its place, answer alike.

// records is what the suite asks of a store.
type records interface {
	events.RecordStore[events.NodeRecord]
	Update(ctx context.Context, key string, change func(*events.NodeRecord) error) (uint64, error)
	Keys(ctx context.Context, filter string) ([]string, error)
}

// store is one store under the contract, with a way to store bytes that
// are no record.
type store struct {
	records
	damage func(t *testing.T, key string)
}

func stores(t *testing.T, ctx context.Context) map[string]store {
	ns := natstest.Start(t)
	js, err := eventbus.Open(ctx, ns.Connect(events.Executor), events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := eventbus.NewBucket[events.NodeRecord](ctx, js, events.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	mem := &eventbustest.MemoryBucket[events.NodeRecord]{}
	return map[string]store{
		"jetstream": {b, func(t *testing.T, key string) {
			if _, err := b.KV.Put(ctx, key, []byte("{not json")); err != nil {
				t.Fatal(err)
			}
		}},
		"memory": {mem, func(_ *testing.T, key string) { mem.SetRaw(key, []byte("{not json")) }},
	}
}

func contract(t *testing.T, run func(t *testing.T, ctx context.Context, s store)) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, s := range stores(t, ctx) {
		t.Run(name, func(t *testing.T) { run(t, ctx, s) })
	}
}

func TestRecordsGetPut(t *testing.T) {
	contract(t, func(t *testing.T, ctx context.Context, s store) {
		const key = "w.create.f.n"
		if _, _, err := s.Get(ctx, key); !errors.Is(err, events.ErrNoRecord) {
			t.Fatalf("get of nothing: %v", err)
		}
		rev, err := s.Put(ctx, key, events.NodeRecord{Status: dag.NodeRunning, Attempt: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, key, events.NodeRecord{Status: dag.NodeRunning}, 0); !errors.Is(err, events.ErrChanged) {
			t.Fatalf("second create: %v", err)
		}
		if _, err := s.Put(ctx, key, events.NodeRecord{Status: dag.NodeFailed}, rev+7); !errors.Is(err, events.ErrChanged) {
			t.Fatalf("stale compare-and-set: %v", err)
		}
		next, err := s.Put(ctx, key, events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 1}, rev)
		if err != nil || next <= rev {
			t.Fatalf("compare-and-set: revision %d after %d, %v", next, rev, err)
		}
		got, at, err := s.Get(ctx, key)
		if err != nil || got.Status != dag.NodeSucceeded || at != next {
			t.Fatalf("get: %+v at %d, %v", got, at, err)
		}
		s.damage(t, "w.create.f.bad")
		if _, rev, err := s.Get(ctx, "w.create.f.bad"); !errors.Is(err, events.ErrBadRecord) || rev == 0 {
			t.Fatalf("damaged record: rev %d, %v", rev, err)
		}
		keys, err := s.Keys(ctx, "w.create.>")
		slices.Sort(keys)
		if err != nil || !slices.Equal(keys, []string{"w.create.f.bad", "w.create.f.n"}) {
			t.Fatalf("keys %v %v", keys, err)
		}
	})
}

// Update creates a record that is not there, from the zero value, and
// changes one that is, at the revision it read.
func TestRecordsUpdate(t *testing.T) {
	contract(t, func(t *testing.T, ctx context.Context, s store) {
		const key = "w.create.f.u"
		rev, err := s.Update(ctx, key, func(r *events.NodeRecord) error {
			if !reflect.DeepEqual(*r, events.NodeRecord{}) {
				t.Errorf("a record not there reads as %+v", *r)
			}
			r.Status, r.Attempt = dag.NodeRunning, 1
			return nil
		})
		if err != nil || rev == 0 {
			t.Fatalf("update of nothing: revision %d, %v", rev, err)
		}
		next, err := s.Update(ctx, key, func(r *events.NodeRecord) error {
			r.Attempt++
			return nil
		})
		if err != nil || next <= rev {
			t.Fatalf("update: revision %d after %d, %v", next, rev, err)
		}
		got, at, err := s.Get(ctx, key)
		if err != nil || got.Status != dag.NodeRunning || got.Attempt != 2 || at != next {
			t.Fatalf("after two updates: %+v at %d (want attempt 2 at %d), %v", got, at, next, err)
		}
	})
}

// A write another writer makes between Update's read and its write is
// not lost: Update reads again and changes what that writer left.
func TestRecordsUpdateAfterAnotherWriter(t *testing.T) {
	contract(t, func(t *testing.T, ctx context.Context, s store) {
		const key = "w.create.f.race"
		if _, err := s.Put(ctx, key, events.NodeRecord{Attempt: 1}, 0); err != nil {
			t.Fatal(err)
		}
		calls := 0
		_, err := s.Update(ctx, key, func(r *events.NodeRecord) error {
			calls++
			if calls == 1 { // another writer gets there first
				_, rev, err := s.Get(ctx, key)
				if err != nil {
					return err
				}
				if _, err := s.Put(ctx, key, events.NodeRecord{Attempt: 1, SpecHash: "theirs"}, rev); err != nil {
					return err
				}
			}
			r.Attempt++
			return nil
		})
		if err != nil || calls != 2 {
			t.Fatalf("update after another writer: %d calls, %v", calls, err)
		}
		got, _, err := s.Get(ctx, key)
		if err != nil || got.Attempt != 2 || got.SpecHash != "theirs" {
			t.Fatalf("the other writer's change or ours is lost: %+v %v", got, err)
		}
	})
}

// Update gives up, with ErrChanged, when the record changes underneath
// every try.
func TestRecordsUpdateIsBounded(t *testing.T) {
	contract(t, func(t *testing.T, ctx context.Context, s store) {
		const key = "w.create.f.busy"
		calls := 0
		_, err := s.Update(ctx, key, func(r *events.NodeRecord) error {
			calls++
			_, rev, _ := s.Get(ctx, key)
			if _, err := s.Put(ctx, key, events.NodeRecord{Attempt: calls}, rev); err != nil {
				return err
			}
			r.Status = dag.NodeSucceeded
			return nil
		})
		if !errors.Is(err, events.ErrChanged) || calls != events.UpdateTries {
			t.Fatalf("under a writer that always wins: %d calls, %v; want %d and ErrChanged", calls, err, events.UpdateTries)
		}
		if got, _, _ := s.Get(ctx, key); got.Status == dag.NodeSucceeded || got.Attempt != events.UpdateTries {
			t.Fatalf("the record is %+v, want the other writer's last", got)
		}
	})
}

// An error of the change, or a damaged record, ends Update with nothing
// written.
func TestRecordsUpdateWritesNothingOnError(t *testing.T) {
	contract(t, func(t *testing.T, ctx context.Context, s store) {
		const key = "w.create.f.keep"
		rev, err := s.Put(ctx, key, events.NodeRecord{Attempt: 3}, 0)
		if err != nil {
			t.Fatal(err)
		}
		refused := errors.New("not this one")
		if _, err := s.Update(ctx, key, func(r *events.NodeRecord) error {
			r.Attempt = 99
			return refused
		}); !errors.Is(err, refused) {
			t.Fatalf("a refused change: %v", err)
		}
		if got, at, err := s.Get(ctx, key); err != nil || got.Attempt != 3 || at != rev {
			t.Fatalf("a refused change wrote: %+v at %d (was %d), %v", got, at, rev, err)
		}
		s.damage(t, "w.create.f.damaged")
		called := false
		if _, err := s.Update(ctx, "w.create.f.damaged", func(*events.NodeRecord) error { called = true; return nil }); !errors.Is(err, events.ErrBadRecord) || called {
			t.Fatalf("update of a damaged record: called %v, %v", called, err)
		}
	})
}
