package formula

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
	"github.com/gantry-dev/gantry/services/executor/internal/slots/slotstest"
)

// countedSlots counts the deletes of each slot key.
type countedSlots struct {
	*slotstest.Memory
	mu      sync.Mutex
	deletes map[string]int
}

func (c *countedSlots) Delete(ctx context.Context, key string, rev uint64) error {
	if strings.HasPrefix(key, "slot.") {
		c.mu.Lock()
		if c.deletes == nil {
			c.deletes = map[string]int{}
		}
		c.deletes[key]++
		c.mu.Unlock()
	}
	return c.Memory.Delete(ctx, key, rev)
}

func (c *countedSlots) deleted() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.deletes)
}

// slotErrors records what the slots manager logs as errors (a lease
// released twice, slots given back twice).
type slotErrors struct {
	mu   sync.Mutex
	msgs []string
}

func (e *slotErrors) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (e *slotErrors) WithAttrs([]slog.Attr) slog.Handler           { return e }
func (e *slotErrors) WithGroup(string) slog.Handler                { return e }
func (e *slotErrors) Handle(_ context.Context, r slog.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.msgs = append(e.msgs, r.Message)
	return nil
}

func (e *slotErrors) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.msgs...)
}

// An outcome that cannot be recorded (the node records' bucket lost with
// a NATS node) ends the run for a redelivery; the lease the node's last
// attempt kept for the next node is given back, once. It was given back
// twice (runNodes released its spare leases, then released them again on
// return), which panicked with "close of closed channel" in the slots
// manager, from Release or from a lingering lease's goroutine.
func TestUnrecordedOutcomeGivesTheKeptSlotsBackOnce(t *testing.T) {
	for _, linger := range []time.Duration{0, slots.DefaultLinger} {
		t.Run("linger="+linger.String(), func(t *testing.T) {
			t.Parallel()
			h := newHarness()
			store := &countedSlots{Memory: slotstest.NewMemory(time.Minute)}
			defer store.Close()
			logged := &slotErrors{}
			h.x.Slots = &slots.Manager{Store: store, Executor: "executor/test", Linger: linger, Log: slog.New(logged)}
			down := errors.New("kv down")
			var mu sync.Mutex
			writes := 0
			h.records.Fail = func(op, key string) error {
				mu.Lock()
				defer mu.Unlock()
				if op == "put" && strings.HasSuffix(key, ".a") {
					if writes++; writes == 2 { // a's outcome, after its attempt's record
						return down
					}
				}
				return nil
			}
			d := dispatch(dag.OpCreate, 1, node("a", "run-a", 1), node("b", "run-b", 1, "a"))
			if err := h.x.Run(context.Background(), d); !errors.Is(err, down) {
				t.Fatalf("Run: %v, want the write failure", err)
			}
			h.x.Slots.GiveBackLingering()
			if k := store.Keys("slot."); len(k) != 0 {
				t.Fatalf("slots left: %v", k)
			}
			if got := store.deleted(); len(got) != 1 || got["slot.n-h1.0"] != 1 {
				t.Fatalf("slot deletes %v, want slot.n-h1.0 once", got)
			}
			if e := logged.all(); len(e) > 0 {
				t.Fatalf("the slots manager logged %q", e)
			}
		})
	}
}

// movedRecords is a node records bucket in which, as a's outcome is
// written, another executor given the same dispatch again has just moved
// a's record on to an attempt of its own (running): the outcome's write
// finds the record changed, and the node is decided again from it.
type movedRecords struct {
	*eventbustest.MemoryBucket[Record]
	mu    sync.Mutex
	moved bool
}

func (r *movedRecords) Put(ctx context.Context, key string, v Record, rev uint64) (uint64, error) {
	r.mu.Lock()
	move := !r.moved && strings.HasSuffix(key, ".a") && v.Status == dag.NodeSucceeded
	r.moved = r.moved || move
	r.mu.Unlock()
	if move {
		cur, curRev, err := r.MemoryBucket.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		cur.Attempt++
		cur.GenAttempts++
		if _, err := r.MemoryBucket.Put(ctx, key, cur, curRev); err != nil {
			return 0, err
		}
	}
	return r.MemoryBucket.Put(ctx, key, v, rev)
}

// A node whose outcome finds its record moved on is decided again from
// it; when that makes another attempt, the lease its last attempt kept
// for the next node goes to that attempt (or back), never left held: it
// was dropped and refreshed for as long as the executor ran, its slot
// taken from every executor.
func TestChangedOutcomeLeavesNoSlotHeld(t *testing.T) {
	t.Parallel()
	h := newHarness()
	recs := &movedRecords{MemoryBucket: h.records}
	h.x.Records = recs
	store := &countedSlots{Memory: slotstest.NewMemory(time.Minute)}
	defer store.Close()
	h.x.Slots = &slots.Manager{Store: store, Executor: "executor/test"}
	d := dispatch(dag.OpCreate, 1, node("a", "run-a", 1), node("b", "run-b", 1, "a"))
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if r := h.record(dag.OpCreate, "b"); r.Status != dag.NodeSucceeded {
		t.Fatalf("b: %+v\n%s", r, strings.Join(h.stored(), "\n"))
	}
	if k := store.Keys("slot."); len(k) != 0 {
		t.Fatalf("slots still held after the run: %v", k)
	}
}
