package eventbus

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Revisions follows the revision of every key of a KV bucket with one
// watch of the keys' metadata (no values cross the wire), so a service
// that keeps records in memory can tell, without a round trip, whether
// another writer (a replica of it) has written one since it read it.
type Revisions struct {
	mu   sync.Mutex
	revs map[string]uint64
}

// WatchRevisions starts following kv's revisions until ctx ends.
func WatchRevisions(ctx context.Context, kv jetstream.KeyValue) (*Revisions, error) {
	w, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", kv.Bucket(), err)
	}
	r := &Revisions{revs: map[string]uint64{}}
	go func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					r.saw(e.Key(), e.Revision())
				}
			}
		}
	}()
	return r, nil
}

func (r *Revisions) saw(key string, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev > r.revs[key] {
		r.revs[key] = rev
	}
}

// Moved says whether key has been written (or deleted) at a revision after
// rev, as far as the watch has seen: a write made a moment ago may not be
// seen yet, so a compare-and-set write remains the final check.
func (r *Revisions) Moved(key string, rev uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.revs[key] > rev
}
