package slots_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
)

// countingStore counts the deletes of each slot key.
type countingStore struct {
	slots.Store
	mu      sync.Mutex
	deletes map[string]int
}

func (c *countingStore) Delete(ctx context.Context, key string, rev uint64) error {
	if strings.HasPrefix(key, "slot.") {
		c.mu.Lock()
		if c.deletes == nil {
			c.deletes = map[string]int{}
		}
		c.deletes[key]++
		c.mu.Unlock()
	}
	return c.Store.Delete(ctx, key, rev)
}

func (c *countingStore) deleted(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deletes[key]
}

// ownership records what the manager logs when slots are given back or
// parked a second time: the one-owner rule broken, which sync.Once in
// giveBack would otherwise hide. A lease released twice by its caller is
// logged too, but that is the caller's bug, and no failure here.
type ownership struct {
	mu   sync.Mutex
	bugs []string
}

func (o *ownership) Enabled(context.Context, slog.Level) bool { return true }
func (o *ownership) WithAttrs([]slog.Attr) slog.Handler       { return o }
func (o *ownership) WithGroup(string) slog.Handler            { return o }
func (o *ownership) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "given back twice") || strings.Contains(r.Message, "parked twice") {
		o.mu.Lock()
		o.bugs = append(o.bugs, r.Message)
		o.mu.Unlock()
	}
	return nil
}

// watch makes ms log to o, and the test fail at its end if o saw a bug.
func (o *ownership) watch(t *testing.T, ms ...*slots.Manager) {
	for _, m := range ms {
		m.Log = slog.New(o)
	}
	t.Cleanup(func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.bugs) > 0 {
			t.Errorf("slots given back or parked more than once: %q", o.bugs)
		}
	})
}

// A lease released twice at once (as the formula runner did with the
// leases it held when an outcome could not be recorded: a NATS outage)
// gives its slots back once. The second Release does nothing: it neither
// closes the lease's channels again (it panicked: "close of closed
// channel" from park's goroutine) nor leaves a copy of the lease lingering
// to be lent, without its slots, to the next attempt.
func TestReleaseTwiceGivesBackOnce(t *testing.T) {
	for _, linger := range []time.Duration{20 * time.Millisecond, 0} {
		t.Run(fmt.Sprint("linger=", linger), func(t *testing.T) {
			mem := newStore(t, time.Second)
			s := &countingStore{Store: mem}
			m := manager(s, "a", time.Second)
			m.Linger = linger
			(&ownership{}).watch(t, m)
			host := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 1}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range 10 {
				l, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Attempt: fmt.Sprint(i)})
				if err != nil {
					t.Fatal(err)
				}
				if k := mem.Keys("slot."); len(k) != 1 {
					t.Errorf("round %d: an attempt holds a lease while the store has the slots %v", i, k)
				}
				var wg sync.WaitGroup
				for range 2 {
					wg.Go(l.Release)
				}
				wg.Wait()
				time.Sleep(2 * linger) // the lingering ends: the next attempt takes the slot anew
				waitFor(t, func() bool { return len(mem.Keys("slot.")) == 0 })
				if n := s.deleted(slots.SlotKey("h-1", 0)); n != i+1 {
					t.Errorf("round %d: the slot was deleted %d times in all, want %d", i, n, i+1)
				}
			}
		})
	}
}

// A Release through a lease whose slots lingered and went to the next
// attempt (a stale handle: its first Release already gave them up) does
// not give back the slots under their new holder.
func TestStaleReleaseKeepsTheNextHoldersSlots(t *testing.T) {
	mem := newStore(t, time.Second)
	s := &countingStore{Store: mem}
	m := manager(s, "a", time.Second)
	m.Linger = time.Minute
	(&ownership{}).watch(t, m)
	host := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 1}
	ctx := context.Background()
	first, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Attempt: "1"})
	if err != nil {
		t.Fatal(err)
	}
	first.Release() // lingers
	next, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Attempt: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(next.Keys(), first.Keys()) {
		t.Fatalf("the next attempt took %v, not the lingering %v", next.Keys(), first.Keys())
	}
	first.Release() // stale: the slots are next's
	m.GiveBackLingering()
	time.Sleep(50 * time.Millisecond)
	if k := mem.Keys("slot."); len(k) != 1 || !next.Keep() {
		t.Errorf("the next attempt's slots were given back by a stale Release: the store has %v, Keep %v", k, next.Keep())
	}
	next.Release()
	m.GiveBackLingering()
	waitFor(t, func() bool { return len(mem.Keys("slot.")) == 0 })
	if n := s.deleted(slots.SlotKey("h-1", 0)); n != 1 {
		t.Errorf("the slot was deleted %d times, want 1", n)
	}
}

// Every way a lease can go back races every other: its lingering ends
// (timer), a waiter on another executor shows up, the next attempt here
// takes it, the executor stops (GiveBackLingering), and a caller releases
// twice. Nothing panics, a limit never has more holders than its max, no
// attempt holds a lease without its slots in the store, and nothing is
// left at the end.
func TestReleaseRaces(t *testing.T) {
	mem := newStore(t, time.Second)
	s := &countingStore{Store: mem}
	a, b := manager(s, "a", time.Second), manager(s, "b", time.Second)
	a.Linger = 2 * time.Millisecond
	b.Linger = time.Millisecond
	(&ownership{}).watch(t, a, b)
	host := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 1}
	label := dag.SlotLimit{ID: "l-web", Name: "role=web", MaxParallel: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var holders atomic.Int32
	var wg sync.WaitGroup
	worker := func(m *slots.Manager, w int) {
		defer wg.Done()
		r := rand.New(rand.NewPCG(uint64(w), 1))
		for i := range 40 {
			l, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{label, host}, Attempt: fmt.Sprintf("%d-%d", w, i)})
			if err != nil {
				t.Error(err)
				return
			}
			if n := holders.Add(1); n > 1 {
				t.Errorf("%d attempts hold the host's one slot", n)
			}
			for _, k := range l.Keys() {
				if !slices.Contains(mem.Keys("slot."), k) {
					t.Errorf("an attempt holds %s, which the store does not have", k)
				}
			}
			time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
			holders.Add(-1)
			if r.IntN(4) == 0 { // a caller that releases twice, at once
				wg.Add(1)
				go func() { defer wg.Done(); l.Release() }()
			}
			l.Release()
			time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
		}
	}
	for w := range 4 {
		wg.Add(1)
		go worker(a, w)
	}
	wg.Add(1)
	go worker(b, 4)
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
				a.GiveBackLingering()
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-stopped
	a.GiveBackLingering()
	b.GiveBackLingering()
	waitFor(t, func() bool { return len(mem.Keys("")) == 0 })
}
