package project

import (
	"context"
	"fmt"
)

// Store holds projection documents: the gantry_state bucket (KVStore), or
// memory for a replay (MemStore). The Projector is its one user.
type Store interface {
	// Get returns the value and revision, or nil when the key is absent.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// PutAll writes every value, creating it (Rev 0) or compare-and-setting
	// it (Rev > 0), and sets each write's NewRev or Err. The writes go out
	// together; PutAll returns when each has its answer.
	PutAll(ctx context.Context, ws []Write)
	// Mark writes val unconditionally without waiting for it to be stored
	// (a lost mark costs only work redone); it may return the failure of
	// an earlier Mark.
	Mark(ctx context.Context, key string, val []byte) error
	// RemoveWorkflow removes every document of a workflow (wf.<id> and
	// wf.<id>.>), leaving nothing behind; removing what is gone does
	// nothing.
	RemoveWorkflow(ctx context.Context, id string) error
}

// Rewritable is a Store a rebuild compares and rewrites: every document
// by a subject filter (Values), and one replaced whatever its revision
// (Rewrite; nil removes it), or many (RewriteAll: the documents keys
// name, to their values in vals, none removing one).
type Rewritable interface {
	Store
	Values(ctx context.Context, filter string) (map[string][]byte, error)
	Rewrite(ctx context.Context, key string, val []byte) error
	RewriteAll(ctx context.Context, keys []string, vals map[string][]byte) error
}

// rewriteEach is RewriteAll as a Rewrite of each key in turn.
func rewriteEach(ctx context.Context, rewrite func(context.Context, string, []byte) error, keys []string, vals map[string][]byte) error {
	for _, k := range keys {
		if err := rewrite(ctx, k, vals[k]); err != nil {
			return fmt.Errorf("rewrite %s: %w", k, err)
		}
	}
	return nil
}

// Write is one document write of a flush.
type Write struct {
	Key    string
	Val    []byte
	Rev    uint64 // the revision it replaces; 0 creates
	NewRev uint64
	Err    error
}
