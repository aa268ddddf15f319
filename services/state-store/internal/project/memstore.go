package project

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/gantry-dev/gantry/pkg/eventbus"
)

// MemStore is a Store in memory: what a replay (Replay, Rebuild) builds
// the projection into, to compare with the live one or to rewrite it. It
// is production code, not a stand-in: tests use it as the in-memory
// Store as well, and the store contract tests hold it to KVStore's
// behaviour. It is not safe for concurrent use (a Projector serializes
// its calls).
type MemStore struct {
	Vals map[string][]byte
	revs map[string]uint64
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{Vals: map[string][]byte{}, revs: map[string]uint64{}} }

func (s *MemStore) Get(_ context.Context, key string) ([]byte, uint64, error) {
	v, ok := s.Vals[key]
	if !ok {
		return nil, 0, nil
	}
	return v, s.revs[key], nil
}

func (s *MemStore) PutAll(_ context.Context, ws []Write) {
	for i, w := range ws {
		if s.revs[w.Key] != w.Rev {
			ws[i].Err = fmt.Errorf("%s: revision %d, not %d", w.Key, s.revs[w.Key], w.Rev)
			continue
		}
		s.revs[w.Key]++
		s.Vals[w.Key] = w.Val
		ws[i].NewRev = s.revs[w.Key]
	}
}

func (s *MemStore) RemoveWorkflow(_ context.Context, id string) error {
	for k := range s.Vals {
		if workflowOf(k) == id {
			delete(s.Vals, k)
			delete(s.revs, k)
		}
	}
	return nil
}

func (s *MemStore) Mark(_ context.Context, key string, val []byte) error {
	s.revs[key]++
	s.Vals[key] = val
	return nil
}

// RewriteAll is a Rewrite of each key.
func (s *MemStore) RewriteAll(ctx context.Context, keys []string, vals map[string][]byte) error {
	return rewriteEach(ctx, s.Rewrite, keys, vals)
}

// Rewrite is KVStore.Rewrite.
func (s *MemStore) Rewrite(_ context.Context, key string, val []byte) error {
	s.revs[key]++
	if val == nil {
		delete(s.Vals, key)
		return nil
	}
	s.Vals[key] = val
	return nil
}

// Remove is KVStore.Remove.
func (s *MemStore) Remove(_ context.Context, key string) error {
	delete(s.Vals, key)
	delete(s.revs, key)
	return nil
}

// Keys is KVStore.Keys.
func (s *MemStore) Keys(_ context.Context, filter string) ([]string, error) {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s.Vals)) {
		if eventbus.KeyMatches(filter, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Values is KVStore.Values.
func (s *MemStore) Values(_ context.Context, filter string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for k, v := range s.Vals {
		if eventbus.KeyMatches(filter, k) {
			out[k] = v
		}
	}
	return out, nil
}
