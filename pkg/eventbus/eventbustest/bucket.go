// Package eventbustest holds in-memory stand-ins for pkg/eventbus' JetStream
// adapters (Bucket, Outbox), for the services' use-case tests. Only tests
// import it: no service binary links it (see the test beside the
// services).
package eventbustest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
)

// MemoryBucket is eventbus.Bucket in memory, for the services' use-case tests. Its
// records are stored encoded, so a caller never shares one with the store.
type MemoryBucket[T any] struct {
	mu   sync.Mutex
	recs map[string]memRecord
	rev  uint64
	// Fail, when set, is asked before each operation ("get", "put",
	// "keys") and the error it returns is the operation's.
	Fail func(op, key string) error
}

type memRecord struct {
	data []byte
	rev  uint64
}

func (m *MemoryBucket[T]) fail(op, key string) error {
	if m.Fail == nil {
		return nil
	}
	return m.Fail(op, key)
}

// Get is eventbus.Bucket.Get.
func (m *MemoryBucket[T]) Get(_ context.Context, key string) (T, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var v T
	if err := m.fail("get", key); err != nil {
		return v, 0, err
	}
	r, ok := m.recs[key]
	if !ok {
		return v, 0, fmt.Errorf("%s: %w", key, events.ErrNoRecord)
	}
	if err := eventbus.DecodeRecord(r.data, &v); err != nil {
		return v, r.rev, fmt.Errorf("%w: %s: %w", events.ErrBadRecord, key, err)
	}
	return v, r.rev, nil
}

// Absent is Bucket.Absent: the memory holds one copy, so its "no
// record" is the answer.
func (m *MemoryBucket[T]) Absent(ctx context.Context, key string) (bool, error) {
	_, _, err := m.Get(ctx, key)
	if errors.Is(err, events.ErrNoRecord) {
		return true, nil
	}
	return false, err
}

// Put is eventbus.Bucket.Put.
func (m *MemoryBucket[T]) Put(_ context.Context, key string, v T, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fail("put", key); err != nil {
		return 0, err
	}
	if m.recs[key].rev != rev {
		return 0, fmt.Errorf("write %s at revision %d: %w", key, rev, events.ErrChanged)
	}
	data, err := eventbus.EncodeRecord(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", key, err)
	}
	if m.recs == nil {
		m.recs = map[string]memRecord{}
	}
	m.rev++
	m.recs[key] = memRecord{data: data, rev: m.rev}
	return m.rev, nil
}

// Revision is eventbus.Bucket.Revision.
func (m *MemoryBucket[T]) Revision(context.Context) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fail("revision", ""); err != nil {
		return 0, err
	}
	return m.rev, nil
}

// Keys is eventbus.Bucket.Keys for filters of the form "prefix.>" or "".
func (m *MemoryBucket[T]) Keys(_ context.Context, filter string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fail("keys", filter); err != nil {
		return nil, err
	}
	var keys []string
	for k := range m.recs {
		if filter == "" || eventbus.KeyMatches(filter, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// Entries reads every record whose key matches filter, as eventbus.Bucket.Entries.
func (m *MemoryBucket[T]) Entries(_ context.Context, filter string) (recs map[string]T, bad map[string]error, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fail("entries", filter); err != nil {
		return nil, nil, err
	}
	recs = map[string]T{}
	for k, r := range m.recs {
		if !eventbus.KeyMatches(filter, k) {
			continue
		}
		var v T
		if err := eventbus.DecodeRecord(r.data, &v); err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[k] = fmt.Errorf("%w: memory/%s: %w", events.ErrBadRecord, k, err)
			continue
		}
		recs[k] = v
	}
	return recs, bad, nil
}

// Remove is eventbus.Bucket.Remove.
func (m *MemoryBucket[T]) Remove(_ context.Context, filter string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fail("remove", filter); err != nil {
		return 0, err
	}
	var n uint64
	for k := range m.recs {
		if eventbus.KeyMatches(filter, k) {
			delete(m.recs, k)
			n++
		}
	}
	return n, nil
}

// Size is eventbus.Bucket.Size.
func (m *MemoryBucket[T]) Size(_ context.Context, filter string) (events.StoreSize, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sz events.StoreSize
	for k, r := range m.recs {
		if eventbus.KeyMatches(filter, k) {
			sz.Messages++
			sz.Bytes += uint64(eventbus.KVRecordSize("memory", k, len(r.data)))
		}
	}
	return sz, nil
}

// Set writes v at key whatever is there (a test's arrangement).
func (m *MemoryBucket[T]) Set(key string, v T) {
	m.mu.Lock()
	rev := m.recs[key].rev
	m.mu.Unlock()
	if _, err := m.Put(context.Background(), key, v, rev); err != nil {
		panic(err)
	}
}

// SetRaw stores data at key as it is (a damaged record, in a test).
func (m *MemoryBucket[T]) SetRaw(key string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs == nil {
		m.recs = map[string]memRecord{}
	}
	m.rev++
	m.recs[key] = memRecord{data: data, rev: m.rev}
}

// Moved is eventbus.Revisions.Moved, exact: whether key's record is at another
// revision than rev (or gone).
func (m *MemoryBucket[T]) Moved(key string, rev uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recs[key].rev != rev
}

// Update is eventbus.Bucket.Update.
func (m *MemoryBucket[T]) Update(ctx context.Context, key string, change func(*T) error) (uint64, error) {
	return events.UpdateRecord[T](ctx, m, key, change)
}
