package slots_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
	"github.com/gantry-dev/gantry/services/executor/internal/slots/slotstest"
)

func newStore(t *testing.T, ttl time.Duration) *slotstest.Memory {
	s := slotstest.NewMemory(ttl)
	t.Cleanup(s.Close)
	return s
}

func manager(s slots.Store, name string, ttl time.Duration) *slots.Manager {
	return &slots.Manager{Store: s, Executor: "executor/" + name, TTL: ttl, MaxPoll: 100 * time.Millisecond}
}

// Three executors, 30 attempts over three hosts of one label limit: at no
// time do more hold a slot than the host's max (1) or the limit's (2).
func TestLimitsHoldAcrossManagers(t *testing.T) {
	s := newStore(t, time.Second)
	ms := []*slots.Manager{manager(s, "a", time.Second), manager(s, "b", time.Second), manager(s, "c", time.Second)}
	label := dag.SlotLimit{ID: "l-web", Name: "role=web", MaxParallel: 2}
	var perHost [3]atomic.Int32
	var inLabel, maxLabel atomic.Int32
	var wg sync.WaitGroup
	var failures atomic.Int32
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := i % 3
			host := dag.SlotLimit{ID: fmt.Sprintf("h-%d", h), Name: fmt.Sprintf("host %d", h), MaxParallel: 1}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l, err := ms[i%3].Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{label, host}, Attempt: fmt.Sprint(i)})
			if err != nil {
				t.Error(err)
				return
			}
			if n := perHost[h].Add(1); n > 1 {
				failures.Add(1)
			}
			n := inLabel.Add(1)
			for {
				m := maxLabel.Load()
				if n <= m || maxLabel.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
			perHost[h].Add(-1)
			inLabel.Add(-1)
			l.Release()
		}()
	}
	wg.Wait()
	if failures.Load() > 0 {
		t.Errorf("a host ran %d attempts beyond its max of 1", failures.Load())
	}
	if maxLabel.Load() > 2 {
		t.Errorf("the label limit of 2 had %d at once", maxLabel.Load())
	}
	if maxLabel.Load() < 2 {
		t.Errorf("the label limit never had 2 at once (max %d): limits are too strict", maxLabel.Load())
	}
	if k := s.Keys(""); len(k) != 0 {
		t.Errorf("keys left: %v", k)
	}
}

// Attempts asking for the same two limits (given in either order) never
// hold each other up.
func TestNoDeadlock(t *testing.T) {
	s := newStore(t, time.Second)
	a, b := dag.SlotLimit{ID: "a", MaxParallel: 1}, dag.SlotLimit{ID: "b", MaxParallel: 1}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls := []dag.SlotLimit{a, b}
			if i%2 == 1 {
				ls = []dag.SlotLimit{b, a}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := manager(s, fmt.Sprint(i%4), time.Second).Acquire(ctx, slots.Request{Limits: ls})
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
			l.Release()
		}()
	}
	wg.Wait()
}

// With one slot held, a priority-10 waiter and then a priority-90 one: the
// 90 goes first when the slot frees, even on another executor.
func TestPriorityFirst(t *testing.T) {
	s := newStore(t, time.Second)
	lim := dag.SlotLimit{ID: "one", Name: "one", MaxParallel: 1}
	ctx := context.Background()
	holder, err := manager(s, "a", time.Second).Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	var waited atomic.Int32
	run := func(m *slots.Manager, prio int, name string) {
		l, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}, Priority: prio, Waiting: func(l dag.SlotLimit, running int) {
			if l.ID != "one" || running != 1 {
				t.Errorf("waiting for %v with %d running", l, running)
			}
			waited.Add(1)
		}})
		if err != nil {
			t.Error(err)
			return
		}
		order <- name
		time.Sleep(20 * time.Millisecond)
		l.Release()
	}
	go run(manager(s, "b", time.Second), 10, "low")
	waitFor(t, func() bool { return len(s.Keys("wait.one.")) == 1 })
	// The high one is the slower to take a slot once it frees: it still
	// goes first.
	go run(manager(slowSlots{s}, "c", time.Second), 90, "high")
	waitFor(t, func() bool { return len(s.Keys("wait.one.")) == 2 })
	holder.Release()
	if first, second := <-order, <-order; first != "high" || second != "low" {
		t.Errorf("order %s, %s; want high, low", first, second)
	}
	if waited.Load() != 2 {
		t.Errorf("%d waits announced, want 2", waited.Load())
	}
}

// A waiting attempt stops waiting when it is cancelled, and leaves no key.
func TestCancelWhileWaiting(t *testing.T) {
	s := newStore(t, time.Second)
	lim := dag.SlotLimit{ID: "one", MaxParallel: 1}
	holder, err := manager(s, "a", time.Second).Acquire(context.Background(), slots.Request{Limits: []dag.SlotLimit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := manager(s, "b", time.Second).Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}})
		done <- err
	}()
	waitFor(t, func() bool { return len(s.Keys("wait.")) == 1 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting after cancel")
	}
	waitFor(t, func() bool { return len(s.Keys("wait.")) == 0 })
}

// The slots of an executor that stops refreshing them (it died) free
// themselves after the TTL; a live holder keeps its slot past the TTL.
func TestDeadHolderExpires(t *testing.T) {
	ttl := 300 * time.Millisecond
	s := newStore(t, ttl)
	lim := dag.SlotLimit{ID: "one", MaxParallel: 1}
	live, err := manager(s, "a", ttl).Acquire(context.Background(), slots.Request{Limits: []dag.SlotLimit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl)
	if len(s.Keys("slot.one.")) != 1 {
		t.Fatal("a refreshed slot expired")
	}
	live.Die() // the holder dies: no refresh, no release
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*ttl)
	defer cancel()
	l, err := manager(s, "b", ttl).Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}})
	if err != nil {
		t.Fatalf("the dead holder's slot did not free: %v", err)
	}
	defer l.Release()
	if d := time.Since(start); d > 3*ttl {
		t.Errorf("took %s", d)
	}
}

// slowSlots takes 50 ms to create a slot key.
type slowSlots struct{ slots.Store }

func (s slowSlots) Create(ctx context.Context, key string, val []byte) (uint64, error) {
	if strings.HasPrefix(key, "slot.") {
		time.Sleep(50 * time.Millisecond)
	}
	return s.Store.Create(ctx, key, val)
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for range 500 {
		if ok() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met within 5s")
}

// A lease may pass to the next attempt of the same dispatch while nobody
// waits for its slots ahead of it; a waiter of the same or a higher
// priority, registered since, makes it go back (the waiter goes first),
// and a waiter of a lower priority does not.
func TestLeaseKeep(t *testing.T) {
	s := newStore(t, time.Second)
	lim := dag.SlotLimit{ID: "one", Name: "one", MaxParallel: 1}
	ctx := context.Background()
	a := manager(s, "a", time.Second)
	l, err := a.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}, Priority: 50})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Keep() {
		t.Fatal("nobody waits: the lease should be kept")
	}
	var nilLease *slots.Lease
	if nilLease.Keep() {
		t.Fatal("no lease kept")
	}
	for _, c := range []struct {
		prio int
		keep bool
	}{{10, true}, {50, false}, {90, false}} {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if w, err := manager(s, "b", time.Second).Acquire(wctx, slots.Request{Limits: []dag.SlotLimit{lim}, Priority: c.prio}); err == nil {
				w.Release()
			}
		}()
		waitFor(t, func() bool { return len(a.KeysWithPrefix("wait.one.")) == 1 })
		if got := l.Keep(); got != c.keep {
			t.Errorf("a waiter of priority %d: Keep = %v, want %v", c.prio, got, c.keep)
		}
		cancel()
		<-done
		waitFor(t, func() bool { return len(a.KeysWithPrefix("wait.one.")) == 0 })
	}
	l.Release()
}

// With Linger, the slots of an ended attempt stay taken for the next
// attempt of the same limits here, which takes them without a write; left
// alone they are given back once Linger has passed.
func TestLingerHandsSlotsToTheNextAttempt(t *testing.T) {
	s := newStore(t, time.Second)
	m := manager(s, "a", time.Second)
	m.Linger = 300 * time.Millisecond
	host := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 1}
	ctx := context.Background()
	l, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Attempt: "1"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	writes := s.Writes()
	again, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Attempt: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if !slots.SameSlots(again, l) || s.Writes() != writes {
		t.Fatalf("the next attempt took its slot with %d writes (same slots: %v), want the lingering ones and none", s.Writes()-writes, slots.SameSlots(again, l))
	}
	if k := s.Keys("slot."); len(k) != 1 {
		t.Fatalf("slots held: %v", k)
	}
	again.Release()
	deadline := time.Now().Add(3 * time.Second)
	for len(s.Keys("slot.")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the lingering slot was not given back: %v", s.Keys("slot."))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lingering slot never keeps a waiter waiting: another executor that
// needs it gets it long before Linger has passed, and slots of other
// limits are not lent.
func TestLingerYieldsToAWaiter(t *testing.T) {
	s := newStore(t, time.Second)
	a, b := manager(s, "a", time.Second), manager(s, "b", time.Second)
	a.Linger = time.Minute
	host := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 1}
	other := dag.SlotLimit{ID: "h-2", Name: "host 2", MaxParallel: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := a.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Attempt: "1"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if o, err := a.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{other}, Attempt: "2"}); err != nil || slots.SameSlots(o, l) {
		t.Fatalf("another limit's attempt got the lingering lease (%v) or %v", err == nil && slots.SameSlots(o, l), err)
	}
	start := time.Now()
	got, err := b.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Attempt: "3"})
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the waiter waited %s for a lingering slot", waited)
	}
	if k := got.Keys(); len(k) != 1 || k[0] != slots.SlotKey("h-1", 0) {
		t.Fatalf("keys %v", k)
	}
	got.Release()
	if again, _ := a.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Attempt: "4"}); slots.SameSlots(again, l) {
		t.Fatal("the lease given up for the waiter was lent again")
	}
}

// A lingering slot is given back to a waiter of a lower priority too: it
// would have had the slot at once had it not lingered, so lingering must
// not keep it waiting (nor a chain of this executor's attempts starve it).
func TestLingerYieldsToALowerPriorityWaiter(t *testing.T) {
	s := newStore(t, time.Second)
	a, b := manager(s, "a", time.Second), manager(s, "b", time.Second)
	a.Linger = time.Minute
	host := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := a.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Priority: 80, Attempt: "1"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	start := time.Now()
	got, err := b.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{host}, Priority: 10, Attempt: "2"})
	if err != nil {
		t.Fatalf("the lower-priority waiter did not get the lingering slot after %s: %v", time.Since(start), err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the waiter waited %s for a lingering slot", waited)
	}
	got.Release()
}

// A lingering lease holds the slots it took under its limits' maxima of
// then: an attempt whose limit of the same ID has a smaller max (another
// composition's, or the composition changed) does not take it when that
// would put it beyond its max.
func TestLingerRespectsTheTakersMax(t *testing.T) {
	s := newStore(t, time.Second)
	a, b := manager(s, "a", time.Second), manager(s, "b", time.Second)
	a.Linger = time.Minute
	two := dag.SlotLimit{ID: "l-web", Name: "role=web", MaxParallel: 2}
	one := dag.SlotLimit{ID: "l-web", Name: "role=web", MaxParallel: 1}
	ctx := context.Background()
	other, err := b.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{two}, Attempt: "b1"}) // slot 0
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	l, err := a.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{two}, Attempt: "a1"}) // slot 1
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	got, err := a.Acquire(short, slots.Request{Limits: []dag.SlotLimit{one}, Attempt: "a2"})
	if err == nil {
		t.Fatalf("an attempt of max 1 started while another holds the limit, with keys %v", got.Keys())
	}
}

// holdAll runs n attempts of one limit on m at once, each holding its
// slot for hold, and returns the most that held a slot at a time and the
// order they got it in.
func holdAll(t *testing.T, m *slots.Manager, lim dag.SlotLimit, prio, n int, hold time.Duration, name string, order chan<- string) (most int32) {
	t.Helper()
	var in, top atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}, Priority: prio, Attempt: fmt.Sprint(i)})
			if err != nil {
				t.Error(err)
				return
			}
			if order != nil {
				order <- name
			}
			v := in.Add(1)
			for {
				m := top.Load()
				if v <= m || top.CompareAndSwap(m, v) {
					break
				}
			}
			time.Sleep(hold)
			in.Add(-1)
			l.Release()
		}()
	}
	wg.Wait()
	return top.Load()
}

// Many attempts behind one limit on one executor (a fanout over a host):
// a slot given back goes to the next waiter without being given back to
// the store and taken again, and the waiters show themselves with one key,
// so the store is written a few times in all, not four times per attempt;
// never more than the limit's maximum hold a slot at once.
func TestQueueHandsSlotsOnWithFewWrites(t *testing.T) {
	s := newStore(t, time.Second)
	m := manager(s, "a", time.Second)
	lim := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 2}
	before := s.Writes()
	if most := holdAll(t, m, lim, 0, 40, 2*time.Millisecond, "a", nil); most != 2 {
		t.Errorf("%d held a slot at once, want the limit's 2", most)
	}
	// 2 slots taken and given back, a waiter key written and deleted, and
	// some slack for a waiter that takes a slot from the store
	if w := s.Writes() - before; w > 12 {
		t.Errorf("%d writes for 40 attempts behind a limit of 2, want at most 12", w)
	}
	waitFor(t, func() bool { return len(s.Keys("")) == 0 })
}

// slowWrites makes each write take a round trip, as over the bus.
type slowWrites struct {
	slots.Store
	rtt time.Duration
}

func (s slowWrites) Create(ctx context.Context, key string, val []byte) (uint64, error) {
	time.Sleep(s.rtt)
	return s.Store.Create(ctx, key, val)
}

func (s slowWrites) Update(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	time.Sleep(s.rtt)
	return s.Store.Update(ctx, key, val, rev)
}

func (s slowWrites) Delete(ctx context.Context, key string, rev uint64) error {
	time.Sleep(s.rtt)
	return s.Store.Delete(ctx, key, rev)
}

// The same when a write takes a round trip: a slot given back while the
// queue's first waiter is taking a slot from the store itself (it woke on
// a change, and found one free) still goes to that waiter, rather than
// back to the store for the waiter to take again. (Given back, each such
// slot cost a delete and a create, and made the next waiter take one
// from the store in turn: in a fanout over one host, two of three slots
// passed through the store.)
func TestQueueHandsSlotsOnWhileItsFirstTakesOne(t *testing.T) {
	s := newStore(t, time.Second)
	m := manager(slowWrites{Store: s, rtt: time.Millisecond}, "a", time.Second)
	lim := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 4}
	before := s.Writes()
	if most := holdAll(t, m, lim, 0, 200, time.Millisecond, "a", nil); most > 4 {
		t.Errorf("%d held a slot at once, want at most the limit's 4", most)
	}
	// 4 slots taken and given back, a waiter key written and deleted, and
	// slack for a waiter that takes a slot from the store
	if w := s.Writes() - before; w > 40 {
		t.Errorf("%d writes for 200 attempts behind a limit of 4, want at most 40", w)
	}
	waitFor(t, func() bool { return len(s.Keys("")) == 0 })
}

// Across executors the order stays the one of a key per waiter: a
// waiter of another executor goes after this executor's waiters that came
// before it, and before those that came after it, though they wait in
// one queue behind one key.
func TestQueueKeepsTheOrderAcrossExecutors(t *testing.T) {
	s := newStore(t, time.Second)
	a, b := manager(s, "a", time.Second), manager(s, "b", time.Second)
	lim := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 1}
	holder, err := a.Acquire(context.Background(), slots.Request{Limits: []dag.SlotLimit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 10)
	var wg sync.WaitGroup
	queue := func(m *slots.Manager, name string, after func() bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holdAll(t, m, lim, 0, 1, 10*time.Millisecond, name, order)
		}()
		waitFor(t, after)
		time.Sleep(5 * time.Millisecond) // the next comes later
	}
	for i := range 3 {
		queue(a, fmt.Sprint("a", i), func() bool { return a.Queued("h-1") == i+1 })
	}
	queue(b, "b", func() bool { return len(s.Keys("wait.h-1.")) == 2 })
	for i := 3; i < 6; i++ {
		queue(a, fmt.Sprint("a", i), func() bool { return a.Queued("h-1") == i+1 })
	}
	holder.Release()
	wg.Wait()
	close(order)
	var got []string
	for n := range order {
		got = append(got, n)
	}
	if want := []string{"a0", "a1", "a2", "b", "a3", "a4", "a5"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// A waiter of a higher priority on another executor goes before this
// executor's queue of a lower one, when this executor gives a slot back.
func TestQueueYieldsToAHigherPriorityElsewhere(t *testing.T) {
	s := newStore(t, time.Second)
	a, b := manager(s, "a", time.Second), manager(s, "b", time.Second)
	lim := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 1}
	holder, err := a.Acquire(context.Background(), slots.Request{Limits: []dag.SlotLimit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 10)
	go holdAll(t, a, lim, 10, 3, 5*time.Millisecond, "low", order)
	waitFor(t, func() bool { return len(s.Keys("wait.h-1.")) == 1 })
	go holdAll(t, b, lim, 90, 1, 5*time.Millisecond, "high", order)
	waitFor(t, func() bool { return len(s.Keys("wait.h-1.")) == 2 })
	holder.Release()
	if first := <-order; first != "high" {
		t.Errorf("first after the release: %s, want high (priority 90, on another executor)", first)
	}
	for range 3 {
		<-order
	}
}

// Waiters that give up leave the queue; its key goes with the last one.
func TestQueueKeyGoesWithItsLastWaiter(t *testing.T) {
	s := newStore(t, time.Second)
	m := manager(s, "a", time.Second)
	lim := dag.SlotLimit{ID: "h-1", MaxParallel: 1}
	holder, err := m.Acquire(context.Background(), slots.Request{Limits: []dag.SlotLimit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	var cancels []context.CancelFunc
	errs := make(chan error, 2)
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		go func() {
			_, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}})
			errs <- err
		}()
	}
	waitFor(t, func() bool { return len(m.KeysWithPrefix("wait.")) == 1 && len(s.Keys("wait.")) == 1 })
	time.Sleep(50 * time.Millisecond) // both queued
	cancels[0]()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if k := s.Keys("wait."); len(k) != 1 {
		t.Fatalf("one waiter left, keys %v: want its queue's key", k)
	}
	cancels[1]()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	waitFor(t, func() bool { return len(s.Keys("wait.")) == 0 })
}

// failWaits fails the writes of waiter keys while fail is set.
type failWaits struct {
	slots.Store
	fail *atomic.Bool
}

func (s failWaits) Create(ctx context.Context, key string, val []byte) (uint64, error) {
	if strings.HasPrefix(key, "wait.") && s.fail.Load() {
		return 0, errors.New("no responders available for request")
	}
	return s.Store.Create(ctx, key, val)
}

// A waiter whose queue key cannot be written fails at once with the
// store's error, and leaves the queue working: the next waiter of the
// same limit queues and gets the slot.
func TestQueueKeyWriteFails(t *testing.T) {
	s := newStore(t, time.Second)
	var fail atomic.Bool
	m := manager(failWaits{s, &fail}, "a", time.Second)
	lim := dag.SlotLimit{ID: "h-1", MaxParallel: 1}
	holder, err := m.Acquire(context.Background(), slots.Request{Limits: []dag.SlotLimit{lim}})
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}}); err == nil || ctx.Err() != nil {
		t.Fatalf("err %v (ctx %v): want the store's error at once", err, ctx.Err())
	}
	fail.Store(false)
	got := make(chan error, 1)
	go func() {
		l, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}})
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	waitFor(t, func() bool { return m.Queued("h-1") == 1 })
	holder.Release()
	if err := <-got; err != nil {
		t.Fatalf("the next waiter: %v", err)
	}
	waitFor(t, func() bool { return len(s.Keys("")) == 0 })
}

// Three executors, many attempts of one host's limit of 2 each, taking
// and giving back at once: never more than 2 hold a slot, every attempt
// gets one, and no slot or waiter key is left over (none lost between a
// hand-off and a take).
func TestQueuesOfSeveralExecutors(t *testing.T) {
	s := newStore(t, time.Second)
	lim := dag.SlotLimit{ID: "h-1", Name: "host 1", MaxParallel: 2}
	var in, top atomic.Int32
	var wg sync.WaitGroup
	for e := range 3 {
		m := manager(s, fmt.Sprint("e", e), time.Second)
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				l, err := m.Acquire(ctx, slots.Request{Limits: []dag.SlotLimit{lim}, Priority: 1 + i%3*40, Attempt: fmt.Sprint(e, ".", i)})
				if err != nil {
					t.Error(err)
					return
				}
				v := in.Add(1)
				for {
					m := top.Load()
					if v <= m || top.CompareAndSwap(m, v) {
						break
					}
				}
				time.Sleep(time.Duration(i%3) * time.Millisecond)
				in.Add(-1)
				l.Release()
			}()
		}
	}
	wg.Wait()
	if top.Load() > 2 {
		t.Errorf("%d held a slot at once, max 2", top.Load())
	}
	waitFor(t, func() bool { return len(s.Keys("")) == 0 })
}
