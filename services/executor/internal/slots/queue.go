package slots

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// The local queue of a limit. An attempt that asks for one limit only
// (its host's, the usual case) and has to wait for it waits in this
// executor's queue of that limit, not under a waiter key of its own:
//
//   - the queue shows itself to every executor with one waiter key per
//     priority it holds waiters of, named by when that priority's first
//     waiter came, so Acquire's order across executors holds as with a
//     key per waiter (a higher priority first, then the earlier);
//   - within the queue, waiters go in the same order (priority, then
//     arrival), and only the first of them takes a slot from the store;
//   - a slot this executor gives back goes straight to the queue's first
//     waiter (its key stays taken, and keeps naming the attempt that took
//     it, as a kept lease does) when no other executor's waiter is ahead
//     of it and the slot is within the waiter's maximum;
//   - once a waiter is served while another executor has a waiter of the
//     same limit, the queue's key of that priority is written anew, named
//     by when the priority's next waiter came, so the other executor's
//     waiter goes before the queue's waiters that came after it, as it
//     would with a key per waiter. With nobody else waiting the key stays
//     as it is: no other executor's order depends on it.
//
// A run of many nodes over few hosts (fanout-1000: a thousand nodes
// behind a host's 8 slots) so stores a few keys per limit and busy
// period, where a key per waiter and a slot taken and given back per
// attempt stored four per node. The slots themselves are as before: a
// slot passes from lease to lease without ever being free, so no more
// than a limit's maximum hold it at once.

// localWaiter is one attempt in a queue.
type localWaiter struct {
	limit dag.SlotLimit
	prio  int
	since time.Time // when it came
	seq   uint64
	// under m.mu:
	got    chan *slotSet // buffered 1: the slot set handed to it
	served bool          // out of the queue: handed a set, took one, or gave up
	wake   chan struct{} // buffered 1: it has become its queue's first
}

// queue is a limit's local waiters, in order, and their keys.
type queue struct {
	keyMu sync.Mutex // serializes writing and deleting keys (held without m.mu)
	// under m.mu:
	waiters   []*localWaiter
	keys      map[int]*held   // the waiter key of each priority queued
	retired   map[string]bool // keys of q's deleted or replaced, which the watch may still show
	refreshed time.Time
}

func (m *Manager) queueLocked(id string) *queue {
	if m.queues == nil {
		m.queues = map[string]*queue{}
	}
	q := m.queues[id]
	if q == nil {
		q = &queue{keys: map[int]*held{}, retired: map[string]bool{}}
		m.queues[id] = q
	}
	return q
}

func (m *Manager) queueOf(id string) *queue {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queueLocked(id)
}

// queueKey is the key of a queue's priority, named by at.
func (m *Manager) queueKey(id string, prio int, at time.Time) string {
	m.seq++
	uniq := strings.NewReplacer("/", "-", ".", "-", " ", "-").Replace(m.Executor) + "-q" + strconv.FormatUint(m.seq, 10)
	return waitKey(id, prio, at, uniq)
}

// enqueue puts an attempt of one limit in its queue, writing the key of
// its priority when the queue shows none yet.
func (m *Manager) enqueue(ctx context.Context, l dag.SlotLimit, prio int, since time.Time, val []byte) (*localWaiter, error) {
	m.mu.Lock()
	q := m.queueLocked(l.ID)
	m.seq++
	w := &localWaiter{limit: l, prio: prio, since: since, seq: m.seq, got: make(chan *slotSet, 1), wake: make(chan struct{}, 1)}
	i, _ := slices.BinarySearchFunc(q.waiters, w, func(a, b *localWaiter) int {
		if a.prio != b.prio {
			return b.prio - a.prio // higher first
		}
		return int(a.seq) - int(b.seq)
	})
	q.waiters = slices.Insert(q.waiters, i, w)
	m.mu.Unlock()
	q.keyMu.Lock()
	err := m.showPriority(ctx, l.ID, q, prio, val)
	q.keyMu.Unlock()
	if err != nil {
		m.finish(l.ID, w, prio)
		return nil, err
	}
	return w, nil
}

// showPriority writes the key of priority prio of q when it has waiters
// of it and no key, named by the first one's arrival. Its caller holds
// q.keyMu.
func (m *Manager) showPriority(ctx context.Context, id string, q *queue, prio int, val []byte) error {
	m.mu.Lock()
	_, shown := q.keys[prio]
	first := q.firstOfLocked(prio)
	var k string
	if !shown && first != nil {
		k = m.queueKey(id, prio, first.since)
	}
	m.mu.Unlock()
	if k == "" {
		return nil
	}
	rev, err := m.Store.Create(ctx, k, val)
	if err != nil {
		return err
	}
	m.mu.Lock()
	q.keys[prio] = &held{key: k, rev: rev, val: val}
	m.keys[k] = rev
	m.mu.Unlock()
	return nil
}

func (q *queue) hasLocked(prio int) bool { return q.firstOfLocked(prio) != nil }

// firstOfLocked is the first waiter of priority prio (nil: none).
func (q *queue) firstOfLocked(prio int) *localWaiter {
	for _, w := range q.waiters {
		if w.prio == prio {
			return w
		}
	}
	return nil
}

// firstLocked is the queue's first waiter (nil: none).
func (q *queue) firstLocked() *localWaiter {
	if q == nil || len(q.waiters) == 0 {
		return nil
	}
	return q.waiters[0]
}

// removeLocked takes w out of q (it was served, or gave up); the waiter
// first after it is woken to take its turn (the others sleep on).
func (m *Manager) removeLocked(q *queue, w *localWaiter) {
	if i := slices.Index(q.waiters, w); i >= 0 {
		q.waiters = slices.Delete(q.waiters, i, i+1)
		if next := q.firstLocked(); i == 0 && next != nil {
			select {
			case next.wake <- struct{}{}:
			default:
			}
		}
	}
	w.served = true
}

// mineLocked says whether key is one of q's, current or retired.
func (q *queue) mineLocked(key string) bool {
	if q.retired[key] {
		return true
	}
	for _, h := range q.keys {
		if h.key == key {
			return true
		}
	}
	return false
}

// aheadOfLocked says whether another executor's waiter (or one of this
// executor's that does not wait in q) sorts before w: a higher priority,
// or the same and earlier. q's own keys are not counted: w goes after
// q's waiters before it by the queue's own order.
func (m *Manager) aheadOfLocked(q *queue, w *localWaiter) bool {
	id := w.limit.ID
	prefix, mine := "wait."+id+".", waitKey(id, w.prio, w.since, "~")
	for k := range m.keys {
		if strings.HasPrefix(k, prefix) && k < mine && !q.mineLocked(k) {
			return true
		}
	}
	return false
}

// othersWaitLocked says whether a waiter key of limit id is not q's.
func (m *Manager) othersWaitLocked(id string, q *queue) bool {
	prefix := "wait." + id + "."
	for k := range m.keys {
		if strings.HasPrefix(k, prefix) && !q.mineLocked(k) {
			return true
		}
	}
	return false
}

// handLocked gives s, the slot set of an ended attempt of one limit, to
// the first waiter of that limit's queue, when it may have it: no other
// executor's waiter sorts before it, and the slot is within its maximum.
// It reports whether s was handed on. Its caller holds m.mu and owns s.
//
// A first waiter taking a slot from the store at that moment (tryFirst)
// is handed s all the same: it takes s when the store had none for it,
// and gives s on (finish) when it got one there too. Not handed, s would
// go back to the store for the waiter to take again: under a bus's round
// trips that is a delete and a create for most attempts of a busy limit,
// each waking the queue's next first waiter to take a slot in turn.
func (m *Manager) handLocked(s *slotSet) bool {
	if len(s.limits) != 1 {
		return false
	}
	q := m.queues[s.limits[0]]
	w := q.firstLocked()
	if w == nil || m.aheadOfLocked(q, w) || !m.withinMax(s, []dag.SlotLimit{w.limit}) {
		return false
	}
	m.removeLocked(q, w)
	w.got <- s // never blocks: w is out of the queue, handed this one set only
	return true
}

// finish takes w out of its queue for good (served, or giving up) and
// keeps the queue's keys true (leave). A set handed to it meanwhile that
// it will not use goes on, as a lease of its own would.
func (m *Manager) finish(id string, w *localWaiter, prio int) {
	m.leave(id, w)
	select {
	case s := <-w.got:
		(&Lease{m: m, set: s, prio: prio}).Release()
	default:
	}
}

// leave takes w out of its queue (it gave up waiting, or was served), and
// keeps the queue's keys true: the key of w's priority is deleted when no
// waiter of it is left, and written anew, named by when the next came,
// when another executor waits for the limit.
func (m *Manager) leave(id string, w *localWaiter) {
	m.mu.Lock()
	q := m.queueLocked(id)
	m.removeLocked(q, w)
	m.mu.Unlock()
	q.keyMu.Lock()
	defer q.keyMu.Unlock()
	m.mu.Lock()
	k := q.keys[w.prio]
	left := q.hasLocked(w.prio)
	others := k != nil && m.othersWaitLocked(id, q)
	m.mu.Unlock()
	if k == nil || (left && !others) {
		return
	}
	m.replaceKey(id, q, w.prio, k, left)
}

// replaceKey deletes q's key k of priority prio, after writing its
// successor when the priority still has waiters (again): named by when
// its first came. Its caller holds q.keyMu.
func (m *Manager) replaceKey(id string, q *queue, prio int, k *held, again bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.mu.Lock()
	delete(q.keys, prio)
	q.retired[k.key] = true
	m.mu.Unlock()
	if again {
		// the new key first: the queue's waiters are never unshown
		if err := m.showPriority(ctx, id, q, prio, k.val); err != nil {
			m.log().Warn("cannot write a waiter key anew; the old one stays", "key", k.key, "err", err)
			m.mu.Lock()
			if q.keys[prio] == nil {
				q.keys[prio] = k
				delete(q.retired, k.key)
			}
			m.mu.Unlock()
			return
		}
	}
	if err := m.Store.Delete(ctx, k.key, k.rev); err != nil {
		m.log().Warn("cannot delete a waiter key; it expires", "key", k.key, "err", err)
	}
	m.mu.Lock()
	for r := range q.retired { // the watch has shown them gone
		if _, seen := m.keys[r]; !seen {
			delete(q.retired, r)
		}
	}
	m.mu.Unlock()
}

// unstale writes the key of w's priority anew when it names an earlier
// arrival than w's and another executor's waiter sorts between the two:
// that waiter would otherwise wait for the queue (whose key is before
// it) while w waits for it. w is its queue's first.
func (m *Manager) unstale(q *queue, w *localWaiter) {
	m.mu.Lock()
	k := q.keys[w.prio]
	stale := k != nil && q.firstLocked() == w && k.key < waitKey(w.limit.ID, w.prio, w.since, "") && m.aheadOfLocked(q, w)
	m.mu.Unlock()
	if !stale {
		return
	}
	q.keyMu.Lock()
	defer q.keyMu.Unlock()
	m.mu.Lock()
	still := q.keys[w.prio] == k
	m.mu.Unlock()
	if still {
		m.replaceKey(w.limit.ID, q, w.prio, k, true)
	}
}

// refreshQueue writes q's keys again when TTL/3 has passed since it last
// did, so they do not expire while their waiters wait.
func (m *Manager) refreshQueue(q *queue) {
	m.mu.Lock()
	due := time.Since(q.refreshed) > m.ttl()/3
	if due {
		q.refreshed = time.Now() // one refresh at a time; put back if it fails
	}
	m.mu.Unlock()
	if !due {
		return
	}
	q.keyMu.Lock()
	defer q.keyMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl()/3)
	defer cancel()
	m.mu.Lock()
	keys := make([]*held, 0, len(q.keys))
	for _, h := range q.keys {
		keys = append(keys, h)
	}
	m.mu.Unlock()
	failed := false
	for _, h := range keys {
		rev, err := m.Store.Update(ctx, h.key, h.val, h.rev)
		if err != nil {
			rev, err = m.Store.Create(ctx, h.key, h.val)
		}
		m.mu.Lock()
		if err == nil {
			h.rev = rev
		} else {
			failed = true
		}
		m.mu.Unlock()
	}
	if failed {
		m.mu.Lock()
		q.refreshed = time.Time{}
		m.mu.Unlock()
	}
}

// acquireOne is Acquire for one limit: at once when a slot is free and no
// waiter is ahead, else in the limit's queue.
func (m *Manager) acquireOne(ctx context.Context, l dag.SlotLimit, prio int, val []byte, r Request) (*Lease, error) {
	limits := []dag.SlotLimit{l}
	since := time.Now()
	lease, _, err := m.try(ctx, limits, prio, since, nil, val)
	if lease != nil || err != nil {
		return lease, err
	}
	w, err := m.enqueue(ctx, l, prio, since, val)
	if err != nil {
		return nil, err
	}
	if r.Waiting != nil {
		r.Waiting(l, m.running(l.ID))
	}
	q := m.queueOf(l.ID)
	poll := 50 * time.Millisecond
	maxPoll := m.MaxPoll
	if maxPoll <= 0 {
		maxPoll = 2 * time.Second
	}
	for {
		changed := m.changes()
		select {
		case s := <-w.got:
			m.leave(l.ID, w)
			return &Lease{m: m, set: s, prio: prio}, nil
		default:
		}
		if lease, err := m.tryFirst(ctx, q, w, val); lease != nil || err != nil {
			m.finish(l.ID, w, prio)
			return lease, err
		}
		m.unstale(q, w)
		m.refreshQueue(q)
		if !m.isFirst(q, w) {
			// Behind the queue's first, woken when it becomes first
			// (removeLocked); a slow look stands guard.
			changed = nil
		}
		select {
		case <-ctx.Done():
			m.finish(l.ID, w, prio)
			return nil, ctx.Err()
		case s := <-w.got:
			m.leave(l.ID, w)
			return &Lease{m: m, set: s, prio: prio}, nil
		case <-changed:
			poll = 50 * time.Millisecond
		case <-w.wake:
			poll = 50 * time.Millisecond
		case <-time.After(poll):
			poll = min(poll*2, maxPoll)
		}
	}
}

func (m *Manager) isFirst(q *queue, w *localWaiter) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return q.firstLocked() == w
}

// tryFirst takes a slot from the store for w when it is its queue's first
// waiter and no other executor's waiter sorts before it. It returns nil
// when w is not first, or no slot is free for it. With a lease (or an
// error) w is out of the queue already: no set is handed to it after, and
// one handed to it meanwhile (handLocked) is its caller's to give on.
func (m *Manager) tryFirst(ctx context.Context, q *queue, w *localWaiter, val []byte) (*Lease, error) {
	m.mu.Lock()
	k := q.keys[w.prio]
	if q.firstLocked() != w || k == nil || w.served || m.aheadOfLocked(q, w) {
		m.mu.Unlock()
		return nil, nil
	}
	mine := map[string]*held{w.limit.ID: k}
	m.mu.Unlock()
	lease, _, err := m.try(ctx, []dag.SlotLimit{w.limit}, w.prio, w.since, mine, val)
	m.mu.Lock()
	if lease != nil || err != nil {
		m.removeLocked(q, w)
	}
	m.mu.Unlock()
	return lease, err
}
