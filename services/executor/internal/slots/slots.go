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

// Store is the shared key space of slots (gantry_slots; slotstest.Memory in tests).
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

	startMu sync.Mutex // guards started, and the fields below until it is set
	started bool
	mu      sync.Mutex
	keys    map[string]uint64 // the store as last seen
	gone    map[string]uint64 // keys deleted or expired: the revision of their marker
	changed chan struct{}     // closed (and replaced) on every change
	ready   chan struct{}     // closed once the watch has caught up
	seq     uint64
	parked  map[string][]*slotSet // lingering slots, by their limits (limitsKey)
	queues  map[string]*queue     // waiters of one limit, by limit (queue.go)
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

// Lease is the slots an attempt holds: its handle on them, good for one
// Release. Lingering slots that the next attempt takes come to it under a
// Lease of its own, so a Release through the first attempt's Lease (again)
// never gives back the slots of the attempt that holds them now.
type Lease struct {
	m    *Manager
	set  *slotSet
	prio int
	gone bool // Release was called (under m.mu): the slots are not this lease's any more
}

// slotSet is slots taken together by one Acquire, refreshed until they
// are given back; lingering, they pass from lease to lease. Exactly one
// owner at a time gives them back: the lease holding them (Release), or,
// while they linger, whichever takes them out of Manager.parked first
// (unpark, takeParked, GiveBackLingering).
type slotSet struct {
	m      *Manager
	held   []held
	limits []string // the limit of each held key
	stop   chan struct{}
	done   chan struct{}
	given  sync.Once // giveBack's work
	// under m.mu:
	lingering bool          // in m.parked
	left      chan struct{} // closed when it stops lingering (taken or given back)
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

// start begins following the store, once it can: a watch that cannot
// start (the bus down) fails this Acquire, and the next tries again.
func (m *Manager) start() error {
	m.startMu.Lock()
	if !m.started {
		m.keys = map[string]uint64{}
		m.gone = map[string]uint64{}
		m.changed = make(chan struct{})
		m.ready = make(chan struct{})
		ch, err := m.Store.Watch(context.Background())
		if err != nil {
			m.startMu.Unlock()
			return fmt.Errorf("watch the slots: %w", err)
		}
		m.started = true
		go m.follow(ch)
	}
	ready := m.ready
	m.startMu.Unlock()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		return errors.New("the slots watch did not catch up within 30s")
	}
	return nil
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
	return m.aheadLocked(id, mine)
}

func (m *Manager) aheadLocked(id string, mine string) bool {
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
	val, _ := json.Marshal(events.SlotHolder{Executor: m.Executor, Attempt: r.Attempt, Priority: prio})
	if len(limits) == 1 {
		return m.acquireOne(ctx, limits[0], prio, val, r) // queue.go
	}
	m.mu.Lock()
	m.seq++
	uniq := strings.NewReplacer("/", "-", ".", "-", " ", "-").Replace(m.Executor) + "-" + strconv.FormatUint(m.seq, 10)
	m.mu.Unlock()
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
	set := &slotSet{m: m, held: got, limits: ids, stop: make(chan struct{}), done: make(chan struct{})}
	go set.refresh()
	return &Lease{m: m, set: set, prio: prio}, dag.SlotLimit{}, nil
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

// refresh writes the held keys again every TTL/3 until they are given
// back.
func (s *slotSet) refresh() {
	defer close(s.done)
	t := time.NewTicker(s.m.ttl() / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		for i := range s.held {
			h := &s.held[i]
			ctx, cancel := context.WithTimeout(context.Background(), s.m.ttl()/3)
			rev, err := s.m.Store.Update(ctx, h.key, h.val, h.rev)
			if err != nil {
				// Expired (a long pause) or the store lost it: take it again
				// if it is free; the node runs on either way.
				if rev, err = s.m.Store.Create(ctx, h.key, h.val); err != nil {
					s.m.log().Warn("cannot refresh a slot", "key", h.key, "err", err)
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
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if l.gone {
		return false
	}
	now := time.Now()
	for _, id := range l.set.limits {
		if m.aheadLocked(id, waitKey(id, l.prio, now, "~")) {
			return false
		}
	}
	return true
}

// Release gives the slots back, in reverse order; with Linger, and
// nobody waiting for them, they linger for this executor's next attempt
// of the same limits first. A lease is released once: a second Release
// (a caller's bug) is logged and does nothing, whoever holds the slots
// by then.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	m, s := l.m, l.set
	m.mu.Lock()
	if l.gone {
		m.mu.Unlock()
		m.log().Error("a lease of slots released twice; the second Release is ignored", "keys", l.Keys())
		return
	}
	l.gone = true
	if m.handLocked(s) { // to this executor's next waiter (queue.go)
		m.mu.Unlock()
		return
	}
	if m.Linger > 0 && !m.waitedLocked(s.limits) {
		m.parkLocked(s)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	s.giveBack()
}

// giveBack stops refreshing the slots and deletes their keys. Its caller
// is their one owner (see slotSet), so it runs once; a second call is a
// bug, logged, and does nothing.
func (s *slotSet) giveBack() {
	first := false
	s.given.Do(func() {
		first = true
		close(s.stop)
		<-s.done
		for i := len(s.held) - 1; i >= 0; i-- {
			h := s.held[i]
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.m.Store.Delete(ctx, h.key, h.rev); err != nil {
				s.m.log().Warn("cannot give a slot back; it expires", "key", h.key, "err", err)
			}
			cancel()
			s.m.saw(h.key, 0, true)
		}
	})
	if !first {
		s.m.log().Error("slots given back twice; the second time is ignored", "keys", s.keys())
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
	var all []*slotSet
	for _, ss := range m.parked {
		all = append(all, ss...)
	}
	for _, s := range all {
		m.unparkLocked(s)
	}
	m.mu.Unlock()
	for _, s := range all {
		s.giveBack()
	}
}

// waited says whether anyone waits for one of the limits ids, whatever
// its priority: a lingering lease is given back to it, as it would have
// been had it not lingered.
func (m *Manager) waited(ids []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waitedLocked(ids)
}

func (m *Manager) waitedLocked(ids []string) bool {
	for _, id := range ids {
		if m.aheadLocked(id, "wait."+id+".~") { // after every waiter's key
			return true
		}
	}
	return false
}

// limitsKey names a set of limits (sorted by ID).
func limitsKey(ids []string) string { return strings.Join(ids, "\x00") }

// parkLocked keeps s for Linger, refreshed as while it ran, and gives it
// back then, or as soon as a waiter for one of its limits shows up, unless
// takeParked or GiveBackLingering took it meanwhile. Its caller holds
// m.mu, and gave up its lease on s.
func (m *Manager) parkLocked(s *slotSet) {
	if s.lingering { // cannot be: only a lease not released yet parks, and a lingering set has none
		m.log().Error("slots parked twice; the second time is ignored", "keys", s.keys())
		return
	}
	key := limitsKey(s.limits)
	if m.parked == nil {
		m.parked = map[string][]*slotSet{}
	}
	m.parked[key] = append(m.parked[key], s)
	s.lingering = true
	left := make(chan struct{})
	s.left = left
	go func() {
		t := time.NewTimer(m.Linger)
		defer t.Stop()
		for {
			select {
			case <-left:
				return // taken, or given back by GiveBackLingering
			case <-t.C:
			case <-m.changes():
				if !m.waited(s.limits) {
					continue
				}
			}
			if m.unpark(s, left) {
				m.mu.Lock()
				handed := m.handLocked(s)
				m.mu.Unlock()
				if !handed {
					s.giveBack()
				}
			}
			return
		}
	}()
}

// unpark takes s out of the lingering slots if it still lingers since it
// was parked with left: the caller owns it then, to give it back.
func (m *Manager) unpark(s *slotSet, left chan struct{}) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !s.lingering || s.left != left {
		return false
	}
	m.unparkLocked(s)
	return true
}

// unparkLocked takes lingering s out of m.parked (under m.mu) and ends
// its lingering: the caller owns it.
func (m *Manager) unparkLocked(s *slotSet) {
	key := limitsKey(s.limits)
	if i := slices.Index(m.parked[key], s); i >= 0 {
		m.parked[key] = slices.Delete(m.parked[key], i, i+1)
	}
	if len(m.parked[key]) == 0 {
		delete(m.parked, key)
	}
	s.lingering = false
	close(s.left)
}

// takeParked returns, under a new lease, lingering slots of exactly these
// limits, when nobody waits for any of them.
func (m *Manager) takeParked(limits []dag.SlotLimit, prio int) *Lease {
	ids := make([]string, len(limits))
	for i, l := range limits {
		ids[i] = l.ID
	}
	key := limitsKey(ids)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.parked[key]) == 0 || m.waitedLocked(ids) {
		return nil // none, or it is given back for the waiter
	}
	// slots all within these limits' maxima (a limit of the same ID may
	// have a smaller max now: another composition's, or changed)
	for i := len(m.parked[key]) - 1; i >= 0; i-- {
		if s := m.parked[key][i]; m.withinMax(s, limits) {
			m.unparkLocked(s)
			return &Lease{m: m, set: s, prio: prio}
		}
	}
	return nil
}

// withinMax says whether every slot s holds is one Acquire could take
// under limits (of s's limits, in the same order).
func (m *Manager) withinMax(s *slotSet, limits []dag.SlotLimit) bool {
	for j, h := range s.held {
		i, err := strconv.Atoi(strings.TrimPrefix(h.key, "slot."+limits[j].ID+"."))
		if err != nil || i >= m.max(limits[j]) {
			return false
		}
	}
	return true
}

// Keys are the keys the lease holds (for tests).
func (l *Lease) Keys() []string { return l.set.keys() }

func (s *slotSet) keys() []string {
	out := make([]string, len(s.held))
	for i, h := range s.held {
		out[i] = h.key
	}
	return out
}
