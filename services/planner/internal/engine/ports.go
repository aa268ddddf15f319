package engine

import (
	"context"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
)

// The engine's ports: where it keeps runs, what it reads of the other
// services, and where its decisions go. eventbus.Bucket and eventbus.Outbox
// are the JetStream adapters; eventbustest.MemoryBucket and eventbustest.MemoryOutbox
// the in-memory ones.

// Records is a store of one record type with compare-and-set writes: the
// planner's own buckets.
type Records[T any] interface {
	// Get returns the record at key and its revision (events.ErrNoRecord
	// when there is none).
	Get(ctx context.Context, key string) (T, uint64, error)
	// Absent asks the authoritative copy whether key holds no record: Get
	// may read a replica that is behind, whose "no record" is no proof.
	Absent(ctx context.Context, key string) (bool, error)
	// Put creates the record (rev 0) or replaces revision rev
	// (events.ErrChanged when the store holds something else).
	Put(ctx context.Context, key string, v T, rev uint64) (uint64, error)
	// Keys lists the keys matching a KV filter ("" for all).
	Keys(ctx context.Context, filter string) ([]string, error)
	// Entries reads every record whose key matches filter; one that does
	// not decode is left out and returned in bad, by key.
	Entries(ctx context.Context, filter string) (recs map[string]T, bad map[string]error, err error)
	// Remove deletes the records matching a KV filter (a prune).
	Remove(ctx context.Context, filter string) (uint64, error)
	// Size counts the records matching a KV filter and their bytes.
	Size(ctx context.Context, filter string) (events.StoreSize, error)
}

// Revisions says, without a round trip, whether a record has been written
// at a revision after rev (by another planner replica): eventbus.Revisions,
// a watch of a bucket's revisions; eventbustest.MemoryBucket in tests.
type Revisions interface {
	Moved(key string, rev uint64) bool
}

// Reader reads another service's records.
type Reader[T any] interface {
	Get(ctx context.Context, key string) (T, uint64, error)
}

// Lister reads another service's records, one or all of a KV filter.
type Lister[T any] interface {
	Reader[T]
	// Entries reads every record whose key matches filter ("<workflow
	// id>.>"); a record that does not decode is left out and returned in
	// bad, by key (events.ErrBadRecord), without failing the read.
	Entries(ctx context.Context, filter string) (recs map[string]T, bad map[string]error, err error)
	// Revision is the store's last revision: what was written so far is
	// at or below it.
	Revision(ctx context.Context) (uint64, error)
	// Keys lists the keys matching a KV filter.
	Keys(ctx context.Context, filter string) ([]string, error)
	// Size counts the records matching a KV filter and their bytes.
	Size(ctx context.Context, filter string) (events.StoreSize, error)
}

// EventStore is the event stream (GANTRY_EVENTS) as a prune sees it:
// eventbus.RemoveWorkflowMessages on the stream, or a fake in tests.
type EventStore interface {
	// RemoveWorkflows deletes the events of the workflows in ids published
	// within spans (none when dryRun), and says what they were.
	RemoveWorkflows(ctx context.Context, ids map[string]bool, spans []events.Span, dryRun bool) (events.StoreSize, error)
}

// Emitter publishes the events a unit of work decides. Emit does not wait;
// Flush returns once every event emitted so far is stored (or one cannot
// be), and the engine flushes before it records what the events announce.
// Recheck says that an earlier unit may have stored, since about since,
// what is emitted from now on (zero: no longer): each is then looked for
// before it is sent (eventbus.Outbox.Recheck).
type Emitter interface {
	Emit(ctx context.Context, subject string, pl events.Payload, msgID string)
	Flush(ctx context.Context) error
	Recheck(since time.Time)
}

// Zones says whether any executor takes the dispatches of a zone ("" for
// hosts without one): eventbus.ZoneTakers, the state of the zone's durable
// consumer on GANTRY_DISPATCH.
type Zones interface {
	Takers(ctx context.Context, zone string) (events.Takers, error)
}
