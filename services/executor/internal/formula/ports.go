package formula

import (
	"context"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	"github.com/gantry-dev/gantry/pkg/hostfile"
)

// The formula runner's ports: its node records, what it reads of the
// planner, where its events go and how it reaches hosts. eventbus.Bucket,
// NewBus and transport.Hosts are the real adapters; eventbustest.MemoryBucket,
// eventbustest.MemoryOutbox and any hostexec.AttemptRunner serve the tests.

// Records holds the executor's node records (gantry_nodes).
type Records interface {
	// Get returns the record at key and its revision: events.ErrNoRecord
	// when there is none, events.ErrBadRecord when it does not decode.
	Get(ctx context.Context, key string) (Record, uint64, error)
	// Absent asks the authoritative copy whether key holds no record:
	// Get may read a replica that is behind.
	Absent(ctx context.Context, key string) (bool, error)
	// Put creates the record (rev 0) or replaces revision rev
	// (events.ErrChanged when the store holds something else).
	Put(ctx context.Context, key string, v Record, rev uint64) (uint64, error)
	// Update reads the record (none: the zero record), changes it and
	// writes it back, again while other writers get there first
	// (events.UpdateRecord); it returns the revision written.
	Update(ctx context.Context, key string, change func(*Record) error) (uint64, error)
}

// Runs reads the planner's run states (gantry_runs).
type Runs interface {
	Get(ctx context.Context, id string) (events.RunSnapshot, uint64, error)
	// Absent asks the authoritative copy whether the run state is gone:
	// Get may read a replica that is behind, whose "no record" is no
	// proof.
	Absent(ctx context.Context, id string) (bool, error)
}

// Emitter publishes a formula run's transitions in order; Flush returns
// once every one emitted so far is stored. Recheck says an earlier
// delivery of the dispatch may have stored, since about since, what is
// emitted from now on: each is then looked for before it is sent
// (eventbus.Outbox.Recheck).
type Emitter interface {
	Emit(ctx context.Context, subject string, pl events.Payload, msgID string)
	Flush(ctx context.Context) error
	Recheck(since time.Time)
}

// Bus is where the executor's events go.
type Bus interface {
	// Batch starts the events of one formula run.
	Batch() Emitter
	// Fire publishes an output line without waiting: a lost line never
	// holds up the work that printed it.
	Fire(subject string, pl events.Payload)
}

// Runners gives the runner of a host: of its plain commands (its files)
// and of its nodes' durable attempts.
type Runners interface {
	Runner(t transport.Target) (hostexec.AttemptRunner, error)
}

// Secrets finds the value of a secret a node's env names, on this worker
// (secrets.Dir; secretstest.Map in tests).
type Secrets interface {
	Lookup(name string) (string, error)
	// Bytes is the secret as its file holds it: a secret file's content.
	Bytes(name string) ([]byte, error)
}

// Sources reads the files nodes place from the worker's --files-dir
// (hostfile.Dir).
type Sources interface {
	Content(name string) (hostfile.Content, error)
}

// NewBus is the Bus of a publisher.
func NewBus(p *eventbus.Publisher) Bus { return publisherBus{p} }

type publisherBus struct{ *eventbus.Publisher }

func (b publisherBus) Batch() Emitter { return b.Outbox() }
