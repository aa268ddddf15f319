// Package slots holds concurrency limits across every executor: a node
// takes one slot of each limit its dispatch names (its host's, and the
// composition's limits that match the host) before an attempt starts, and
// gives them back when it ends. A slot is a key in a shared store
// (gantry_slots), created with a compare-and-set by the executor that
// takes it and refreshed while the node runs; keys of an executor that
// died expire. Nodes that find a limit full register as waiters, and a
// free slot goes to the waiter of the highest priority (earliest first).
package slots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// ErrExists is returned by Store.Create when the key is there.
var ErrExists = errors.New("key exists")

// Store is the shared key space of slots (gantry_slots; Memory in tests).
// Every write lives the store's TTL unless written again.
type Store interface {
	// Create writes key if it is absent (ErrExists if not).
	Create(ctx context.Context, key string, val []byte) (uint64, error)
	// Update writes key again if it is still at revision rev.
	Update(ctx context.Context, key string, val []byte, rev uint64) (uint64, error)
	// Delete removes key if it is still at revision rev.
	Delete(ctx context.Context, key string, rev uint64) error
	// Watch sends every key there is, then a Change with an empty Key
	// (caught up), then every change, until ctx ends.
	Watch(ctx context.Context) (<-chan Change, error)
}

// Change is a key written or gone (deleted or expired).
type Change struct {
	Key     string
	Rev     uint64
	Deleted bool
}

// Manager takes and gives back slots for one executor.
type Manager struct {
	Store    Store
	Executor string        // the instance named in the keys' values
	PerHost  int           // max of a limit whose MaxParallel is 0 (default 8)
	TTL      time.Duration // the store's TTL: keys are refreshed every TTL/3 (default events.SlotTTL)
	MaxPoll  time.Duration // longest wait between looks when nothing changes (default 2s)
	// Linger is how long the slots of an ended attempt stay taken for this
	// executor's next attempt of the same limits, which then takes them
	// without a write (0: they are given back at once). Lingering slots
	// are given back as soon as anyone waits for one of their limits, so
	// they never keep a waiter waiting.
	Linger time.Duration
	Log    *slog.Logger

	once    sync.Once
	mu      sync.Mutex
	keys    map[string]uint64 // the store as last seen
	gone    map[string]uint64 // keys deleted or expired: the revision of their marker
	changed chan struct{}     // closed (and replaced) on every change
	ready   chan struct{}     // closed once the watch has caught up
	err     error             // the watch could not start
	seq     uint64
	parked  map[string][]*Lease // lingering leases, by their limits (limitsKey)
}

// Request is what one attempt asks for.
type Request struct {
	Limits   []dag.SlotLimit
	Priority int    // 1-100 (0: dag.DefaultPriority)
	Attempt  string // names the node attempt in the keys' values
	// Waiting is called when the attempt first waits for limit l, with the
	// slots of l in use.
	Waiting func(l dag.SlotLimit, running int)
}

// Lease is the slots an attempt holds.
type Lease struct {
	m      *Manager
	held   []held
	limits []string // the limit of each held key
	prio   int
	stop   chan struct{}
	done   chan struct{}
	parks  int // how often it was parked (under m.mu): a lingering lease's turn
}

type held struct {
	key string
	rev uint64
	val []byte
}

func (m *Manager) ttl() time.Duration {
	if m.TTL <= 0 {
		return events.SlotTTL
	}
	return m.TTL
}

func (m *Manager) log() *slog.Logger {
	if m.Log == nil {
		return slog.Default()
	}
	return m.Log
}

// start begins following the store, once.
func (m *Manager) start() error {
	m.once.Do(func() {
		m.keys = map[string]uint64{}
		m.gone = map[string]uint64{}
		m.changed = make(chan struct{})
		m.ready = make(chan struct{})
		ch, err := m.Store.Watch(context.Background())
		if err != nil {
			m.err = fmt.Errorf("watch the slots: %w", err)
			close(m.ready)
			return
		}
		go m.follow(ch)
	})
	select {
	case <-m.ready:
	case <-time.After(30 * time.Second):
		return errors.New("the slots watch did not catch up within 30s")
	}
	return m.err
}

func (m *Manager) follow(ch <-chan Change) {
	caught := false
	for c := range ch {
		m.mu.Lock()
		switch {
		case c.Key == "":
			if !caught {
				caught = true
				close(m.ready)
			}
		case c.Deleted:
			delete(m.keys, c.Key)
			m.gone[c.Key] = c.Rev
		default:
			m.keys[c.Key] = c.Rev
			delete(m.gone, c.Key)
		}
		close(m.changed)
		m.changed = make(chan struct{})
		m.mu.Unlock()
	}
}

// SlotKey is the key of slot i of limit id.
func SlotKey(id string, i int) string { return "slot." + id + "." + strconv.Itoa(i) }

// waitKey is the key of a waiter: higher priority, then earlier, sorts
// first.
func waitKey(id string, priority int, at time.Time, uniq string) string {
	return fmt.Sprintf("wait.%s.%03d.%020d.%s", id, dag.MaxPriority-priority, at.UnixNano(), uniq)
}

func (m *Manager) max(l dag.SlotLimit) int {
	if l.MaxParallel > 0 {
		return l.MaxParallel
	}
	if m.PerHost > 0 {
		return m.PerHost
	}
	return 8
}

// running counts the slots of limit id in use, as last seen.
func (m *Manager) running(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	prefix := "slot." + id + "."
	for k := range m.keys {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// ahead says whether a waiter for limit id sorts before mine (or, when I
// have not registered, before one registered now).
func (m *Manager) ahead(id string, mine string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix := "wait." + id + "."
	for k := range m.keys {
		if strings.HasPrefix(k, prefix) && k < mine {
			return true
		}
	}
	return false
}

func (m *Manager) present(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.keys[key]
	return ok
}

func (m *Manager) saw(key string, rev uint64, gone bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gone {
		delete(m.keys, key)
	} else {
		m.keys[key] = rev
	}
}

func (m *Manager) changes() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Acquire takes one slot of every limit of r, all or none, waiting while
// any is full or a waiter of a higher priority (or the same, earlier) waits
// for it. Limits are taken in ID order and given back in reverse when one
// is full, so no two attempts hold each other up. It returns ctx's error
// when ctx ends first.
func (m *Manager) Acquire(ctx context.Context, r Request) (*Lease, error) {
	if err := m.start(); err != nil {
		return nil, err
	}
	limits := slices.Clone(r.Limits)
	slices.SortFunc(limits, func(a, b dag.SlotLimit) int { return strings.Compare(a.ID, b.ID) })
	prio := r.Priority
	if prio == 0 {
		prio = dag.DefaultPriority
	}
	if l := m.takeParked(limits, prio); l != nil {
		return l, nil
	}
	m.mu.Lock()
	m.seq++
	uniq := strings.NewReplacer("/", "-", ".", "-", " ", "-").Replace(m.Executor) + "-" + strconv.FormatUint(m.seq, 10)
	m.mu.Unlock()
	val, _ := json.Marshal(events.SlotHolder{Executor: m.Executor, Attempt: r.Attempt, Priority: prio})
	since := time.Now()
	waits := map[string]*held{} // limit id -> my wait key
	announced := map[string]bool{}
	defer func() {
		for _, w := range waits {
			_ = m.Store.Delete(context.WithoutCancel(ctx), w.key, w.rev)
		}
	}()
	poll := 50 * time.Millisecond
	maxPoll := m.MaxPoll
	if maxPoll <= 0 {
		maxPoll = 2 * time.Second
	}
	refreshed := time.Now()
	for {
		changed := m.changes()
		lease, blocked, err := m.try(ctx, limits, prio, since, waits, val)
		if err != nil {
			return nil, err
		}
		if lease != nil {
			return lease, nil
		}
		if waits[blocked.ID] == nil {
			k := waitKey(blocked.ID, prio, since, uniq)
			rev, err := m.Store.Create(ctx, k, val)
			if err != nil {
				return nil, fmt.Errorf("register as waiting for limit %s: %w", blocked.Name, err)
			}
			m.saw(k, rev, false)
			waits[blocked.ID] = &held{key: k, rev: rev, val: val}
		}
		if !announced[blocked.ID] && r.Waiting != nil {
			announced[blocked.ID] = true
			r.Waiting(blocked, m.running(blocked.ID))
		}
		if time.Since(refreshed) > m.ttl()/3 {
			for _, w := range waits {
				if rev, err := m.Store.Update(ctx, w.key, w.val, w.rev); err == nil {
					w.rev = rev
				} else if rev, err := m.Store.Create(ctx, w.key, w.val); err == nil {
					w.rev = rev
				}
			}
			refreshed = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
			poll = 50 * time.Millisecond
		case <-time.After(poll):
			poll = min(poll*2, maxPoll)
		}
	}
}

// try takes every limit's slot, or none: then it names the limit that is
// full (or has a waiter ahead).
func (m *Manager) try(ctx context.Context, limits []dag.SlotLimit, prio int, since time.Time, waits map[string]*held, val []byte) (*Lease, dag.SlotLimit, error) {
	var got []held
	var ids []string
	giveBack := func() {
		for i := len(got) - 1; i >= 0; i-- {
			if err := m.Store.Delete(context.WithoutCancel(ctx), got[i].key, got[i].rev); err != nil {
				m.log().Warn("cannot give a slot back; it expires", "key", got[i].key, "err", err)
			}
			m.saw(got[i].key, 0, true)
		}
	}
	for _, l := range limits {
		mine := waitKey(l.ID, prio, since, "~")
		if w := waits[l.ID]; w != nil {
			mine = w.key
		}
		if m.ahead(l.ID, mine) {
			giveBack()
			return nil, l, nil
		}
		took := false
		for i := range m.max(l) {
			k := SlotKey(l.ID, i)
			if m.present(k) {
				continue
			}
			rev, err := m.create(ctx, k, val)
			if errors.Is(err, ErrExists) {
				continue // taken; the watch will say so
			}
			if err != nil {
				giveBack()
				return nil, l, fmt.Errorf("take a slot of limit %s: %w", l.Name, err)
			}
			m.saw(k, rev, false)
			got = append(got, held{key: k, rev: rev, val: val})
			ids = append(ids, l.ID)
			took = true
			break
		}
		if !took {
			giveBack()
			return nil, l, nil
		}
	}
	lease := &Lease{m: m, held: got, limits: ids, prio: prio, stop: make(chan struct{}), done: make(chan struct{})}
	go lease.refresh()
	return lease, dag.SlotLimit{}, nil
}

// create creates key: over its delete marker, when the watch has shown
// one, with one compare-and-set on the marker's revision (a create over a
// marker otherwise costs a read and a second write); else, or when that
// fails, with Store.Create.
func (m *Manager) create(ctx context.Context, key string, val []byte) (uint64, error) {
	m.mu.Lock()
	marker := m.gone[key]
	m.mu.Unlock()
	if marker > 0 {
		if rev, err := m.Store.Update(ctx, key, val, marker); err == nil {
			return rev, nil
		}
	}
	return m.Store.Create(ctx, key, val)
}

// refresh writes the held keys again every TTL/3 until Release.
func (l *Lease) refresh() {
	defer close(l.done)
	t := time.NewTicker(l.m.ttl() / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		for i := range l.held {
			h := &l.held[i]
			ctx, cancel := context.WithTimeout(context.Background(), l.m.ttl()/3)
			rev, err := l.m.Store.Update(ctx, h.key, h.val, h.rev)
			if err != nil {
				// Expired (a long pause) or the store lost it: take it again
				// if it is free; the node runs on either way.
				if rev, err = l.m.Store.Create(ctx, h.key, h.val); err != nil {
					l.m.log().Warn("cannot refresh a slot", "key", h.key, "err", err)
				}
			}
			cancel()
			if err == nil {
				h.rev = rev
			}
		}
	}
}

// Keep says whether the lease may pass to the next attempt of the same
// dispatch (the same limits and priority) without being given back and
// taken again: none of its limits has a waiter that Acquire would let go
// first (one of a higher priority, or of the same priority registered
// until now), as far as this executor has seen, which is what Acquire
// checks before it takes a free slot. The keys keep naming the attempt
// that took them.
func (l *Lease) Keep() bool {
	if l == nil {
		return false
	}
	now := time.Now()
	for _, id := range l.limits {
		if l.m.ahead(id, waitKey(id, l.prio, now, "~")) {
			return false
		}
	}
	return true
}

// Release gives the slots back, in reverse order; with Linger, and
// nobody waiting for them, they linger for this executor's next attempt
// of the same limits first.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	if l.m.Linger > 0 && !l.m.waited(l.limits) {
		l.m.park(l)
		return
	}
	l.release()
}

func (l *Lease) release() {
	close(l.stop)
	<-l.done
	for i := len(l.held) - 1; i >= 0; i-- {
		h := l.held[i]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := l.m.Store.Delete(ctx, h.key, h.rev); err != nil {
			l.m.log().Warn("cannot give a slot back; it expires", "key", h.key, "err", err)
		}
		cancel()
		l.m.saw(h.key, 0, true)
	}
}

// DefaultLinger is the executor's Linger: well above the time between one
// node's end and the next node's start on its host in a chain of formulas
// (a few milliseconds), well below anything a waiter would notice.
const DefaultLinger = 100 * time.Millisecond

// GiveBackLingering gives back every lingering lease now (the executor
// stops).
func (m *Manager) GiveBackLingering() {
	m.mu.Lock()
	var all []*Lease
	for key, ls := range m.parked {
		all = append(all, ls...)
		delete(m.parked, key)
	}
	for _, l := range all {
		l.parks++ // their lingering ends
	}
	m.mu.Unlock()
	for _, l := range all {
		l.release()
	}
}

// waited says whether anyone waits for one of the limits ids, whatever
// its priority: a lingering lease is given back to it, as it would have
// been had it not lingered.
func (m *Manager) waited(ids []string) bool {
	for _, id := range ids {
		if m.ahead(id, "wait."+id+".~") { // after every waiter's key
			return true
		}
	}
	return false
}

// limitsKey names a set of limits (sorted by ID).
func limitsKey(ids []string) string { return strings.Join(ids, "\x00") }

// park keeps l for Linger, refreshed as while it ran, and gives it back
// then, or as soon as a waiter for one of its limits shows up, unless
// takeParked took it meanwhile.
func (m *Manager) park(l *Lease) {
	key := limitsKey(l.limits)
	m.mu.Lock()
	if m.parked == nil {
		m.parked = map[string][]*Lease{}
	}
	m.parked[key] = append(m.parked[key], l)
	l.parks++
	turn := l.parks
	m.mu.Unlock()
	go func() {
		t := time.NewTimer(m.Linger)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-m.changes():
				if !m.waited(l.limits) {
					continue
				}
			}
			if m.unpark(key, l, turn) {
				l.release()
			}
			return
		}
	}()
}

// unpark takes l out of the lingering leases, if it is still there in the
// same turn.
func (m *Manager) unpark(key string, l *Lease, turn int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l.parks != turn {
		return false
	}
	i := slices.Index(m.parked[key], l)
	if i < 0 {
		return false
	}
	m.parked[key] = slices.Delete(m.parked[key], i, i+1)
	return true
}

// takeParked returns a lingering lease of exactly these limits, when
// nobody waits for any of them.
func (m *Manager) takeParked(limits []dag.SlotLimit, prio int) *Lease {
	ids := make([]string, len(limits))
	for i, l := range limits {
		ids[i] = l.ID
	}
	key := limitsKey(ids)
	m.mu.Lock()
	// one whose slots are all within these limits' maxima (a limit of the
	// same ID may have a smaller max now: another composition's, or changed)
	i := len(m.parked[key]) - 1
	for i >= 0 && !m.withinMax(m.parked[key][i], limits) {
		i--
	}
	if i < 0 {
		m.mu.Unlock()
		return nil
	}
	l := m.parked[key][i]
	m.mu.Unlock()
	if m.waited(ids) {
		return nil // it is given back for the waiter
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	i = slices.Index(m.parked[key], l)
	if i < 0 {
		return nil // given back meanwhile
	}
	m.parked[key] = slices.Delete(m.parked[key], i, i+1)
	l.parks++ // its lingering ends
	l.prio = prio
	return l
}

// withinMax says whether every slot l holds is one Acquire could take
// under limits (of l's limits, in the same order).
func (m *Manager) withinMax(l *Lease, limits []dag.SlotLimit) bool {
	for j, h := range l.held {
		i, err := strconv.Atoi(strings.TrimPrefix(h.key, "slot."+limits[j].ID+"."))
		if err != nil || i >= m.max(limits[j]) {
			return false
		}
	}
	return true
}

// Keys are the keys the lease holds (for tests).
func (l *Lease) Keys() []string {
	out := make([]string, len(l.held))
	for i, h := range l.held {
		out[i] = h.key
	}
	return out
}
