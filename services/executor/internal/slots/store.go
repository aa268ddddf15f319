package slots

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KV is the Store of a JetStream KV bucket (gantry_slots): its TTL is the
// bucket's, and an expired key leaves a marker watchers see as a delete.
// Its writes wait for NC while it is down (a service's connection keeps
// nothing to send then: events.WhenConnected), within their context, or
// events.PublishTimeout when it has no deadline: a slot given back during
// a disconnect is deleted once it is back, not left taken until it
// expires.
type KV struct {
	KV jetstream.KeyValue
	NC *nats.Conn
}

// whenConnected runs a write, again once NC is back (see KV).
func (s KV) whenConnected(ctx context.Context, op func(ctx context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, events.PublishTimeout)
		defer cancel()
	}
	return events.WhenConnected(ctx, s.NC, func() error { return op(ctx) })
}

func (s KV) Create(ctx context.Context, key string, val []byte) (rev uint64, err error) {
	err = s.whenConnected(ctx, func(ctx context.Context) error { rev, err = s.KV.Create(ctx, key, val); return err })
	if events.IsConflict(err) {
		return 0, ErrExists // taken (on an R3 bucket, also the 10164 form)
	}
	return rev, err
}

func (s KV) Update(ctx context.Context, key string, val []byte, rev uint64) (n uint64, err error) {
	err = s.whenConnected(ctx, func(ctx context.Context) error { n, err = s.KV.Update(ctx, key, val, rev); return err })
	return n, err
}

func (s KV) Delete(ctx context.Context, key string, rev uint64) error {
	err := s.whenConnected(ctx, func(ctx context.Context) error { return s.KV.Delete(ctx, key, jetstream.LastRevision(rev)) })
	if err != nil && (events.IsConflict(err) || strings.Contains(err.Error(), "wrong last sequence")) {
		return nil // no longer ours: expired and taken by another
	}
	return err
}

func (s KV) Watch(ctx context.Context) (<-chan Change, error) {
	w, err := s.KV.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan Change, 256)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				c := Change{}
				if e != nil {
					c = Change{Key: e.Key(), Rev: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut}
				}
				select {
				case out <- c:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// Memory is an in-memory Store with a TTL, for tests.
type Memory struct {
	TTL time.Duration

	mu       sync.Mutex
	rev      uint64
	keys     map[string]memEntry
	markers  map[string]uint64 // revision of the delete (or expiry) marker of a key
	watchers []chan Change
	stop     chan struct{}
}

type memEntry struct {
	rev     uint64
	val     []byte
	expires time.Time
}

// NewMemory starts an in-memory store whose keys expire after ttl.
func NewMemory(ttl time.Duration) *Memory {
	m := &Memory{TTL: ttl, keys: map[string]memEntry{}, markers: map[string]uint64{}, stop: make(chan struct{})}
	go func() {
		t := time.NewTicker(ttl / 10)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.expire()
			}
		}
	}()
	return m
}

// Close stops expiring keys.
func (m *Memory) Close() { close(m.stop) }

func (m *Memory) expire() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for k, e := range m.keys {
		if now.After(e.expires) {
			delete(m.keys, k)
			m.rev++
			m.markers[k] = m.rev
			m.notify(Change{Key: k, Rev: m.rev, Deleted: true})
		}
	}
}

func (m *Memory) notify(c Change) {
	for _, w := range m.watchers {
		w <- c
	}
}

func (m *Memory) Create(_ context.Context, key string, val []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.keys[key]; ok {
		return 0, ErrExists
	}
	m.rev++
	delete(m.markers, key)
	m.keys[key] = memEntry{rev: m.rev, val: val, expires: time.Now().Add(m.TTL)}
	m.notify(Change{Key: key, Rev: m.rev})
	return m.rev, nil
}

func (m *Memory) Update(_ context.Context, key string, val []byte, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.keys[key]
	if !ok && m.markers[key] == rev && rev > 0 { // over a delete marker
		e, ok = memEntry{rev: rev}, true
		delete(m.markers, key)
	}
	if !ok || e.rev != rev {
		return 0, errors.New("wrong last sequence")
	}
	m.rev++
	m.keys[key] = memEntry{rev: m.rev, val: val, expires: time.Now().Add(m.TTL)}
	m.notify(Change{Key: key, Rev: m.rev})
	return m.rev, nil
}

func (m *Memory) Delete(_ context.Context, key string, rev uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.keys[key]
	if !ok || e.rev != rev {
		return nil
	}
	delete(m.keys, key)
	m.rev++
	m.markers[key] = m.rev
	m.notify(Change{Key: key, Rev: m.rev, Deleted: true})
	return nil
}

func (m *Memory) Watch(ctx context.Context) (<-chan Change, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan Change, 1<<16)
	for k, e := range m.keys {
		ch <- Change{Key: k, Rev: e.rev}
	}
	ch <- Change{}
	m.watchers = append(m.watchers, ch)
	return ch, nil
}

// Keys are the keys there are now with the prefix.
func (m *Memory) Keys(prefix string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range m.keys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// ExpireAll makes every key with the prefix expire now.
func (m *Memory) ExpireAll(prefix string) {
	m.mu.Lock()
	for k, e := range m.keys {
		if strings.HasPrefix(k, prefix) {
			e.expires = time.Now()
			m.keys[k] = e
		}
	}
	m.mu.Unlock()
	m.expire()
}

// Writes counts the writes so far: creates, updates, deletes and expiries.
func (m *Memory) Writes() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev
}
