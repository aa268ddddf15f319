package events

import (
	"context"
	"errors"
	"fmt"
)

// The record store port: records of one type by key, with compare-and-set
// writes. pkg/eventbus has the JetStream adapter (Bucket) and
// pkg/eventbus/eventbustest the one in memory (MemoryBucket).

// Errors of record stores. A missing record, a record changed underneath
// and a failed read are different things: only the first two are answers.
var (
	// ErrNoRecord: the key holds no record.
	ErrNoRecord = errors.New("no record")
	// ErrChanged: a create found a record there, or a compare-and-set
	// found another revision; read it and decide again.
	ErrChanged = errors.New("record changed underneath")
	// ErrBadRecord: the stored record does not decode.
	ErrBadRecord = errors.New("record does not decode")
)

// UpdateTries bounds UpdateRecord: how many times it reads, changes and writes
// a record that other writers keep changing underneath.
const UpdateTries = 5

// RecordStore is a store of records of type T with compare-and-set
// writes, as eventbus.Bucket: what UpdateRecord needs.
type RecordStore[T any] interface {
	Get(ctx context.Context, key string) (T, uint64, error)
	Put(ctx context.Context, key string, v T, rev uint64) (uint64, error)
}

// UpdateRecord reads the record at key, lets change alter it, and writes
// it back with a compare-and-set on the revision read; when another
// writer got there first (ErrChanged) it reads again and asks change
// again, at most UpdateTries times, then fails with ErrChanged. With no
// record at key, change gets the zero value and the write creates it. An
// error of change ends it, nothing written, and is returned as it is; so
// is a failed read, and a record that does not decode (ErrBadRecord: the
// caller decides whether to write over it). It returns the revision
// written.
func UpdateRecord[T any](ctx context.Context, s RecordStore[T], key string, change func(*T) error) (uint64, error) {
	var lost error
	for range UpdateTries {
		v, rev, err := s.Get(ctx, key)
		if errors.Is(err, ErrNoRecord) {
			var zero T
			v, rev, err = zero, 0, nil
		}
		if err != nil {
			return 0, err
		}
		if err := change(&v); err != nil {
			return 0, err
		}
		n, err := s.Put(ctx, key, v, rev)
		if !errors.Is(err, ErrChanged) {
			return n, err
		}
		lost = err
	}
	return 0, fmt.Errorf("update %s: %w (tried %d times)", key, lost, UpdateTries)
}
