// Package slotstest holds an in-memory slots.Store for tests. Only tests
// import it: no service binary links it.
package slotstest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/services/executor/internal/slots"
)

// Memory is an in-memory slots.Store with a TTL: keys expire as in
// gantry_slots, leaving a marker watchers see as a delete.
type Memory struct {
	TTL time.Duration

	mu       sync.Mutex
	rev      uint64
	keys     map[string]memEntry
	markers  map[string]uint64 // revision of the delete (or expiry) marker of a key
	watchers []chan slots.Change
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
			m.notify(slots.Change{Key: k, Rev: m.rev, Deleted: true})
		}
	}
}

func (m *Memory) notify(c slots.Change) {
	for _, w := range m.watchers {
		w <- c
	}
}

func (m *Memory) Create(_ context.Context, key string, val []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.keys[key]; ok {
		return 0, slots.ErrExists
	}
	m.rev++
	delete(m.markers, key)
	m.keys[key] = memEntry{rev: m.rev, val: val, expires: time.Now().Add(m.TTL)}
	m.notify(slots.Change{Key: key, Rev: m.rev})
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
	m.notify(slots.Change{Key: key, Rev: m.rev})
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
	m.notify(slots.Change{Key: key, Rev: m.rev, Deleted: true})
	return nil
}

func (m *Memory) Watch(ctx context.Context) (<-chan slots.Change, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan slots.Change, 1<<16)
	for k, e := range m.keys {
		ch <- slots.Change{Key: k, Rev: e.rev}
	}
	ch <- slots.Change{}
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
