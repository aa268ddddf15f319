package eventbus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxOutboxPending bounds the publishes an Outbox has in flight, well
// inside the client's limit of asynchronous publishes.
const MaxOutboxPending = 256

// Outbox publishes a unit of work's events without waiting for each, in
// order on one connection, and stores them all by Flush: what a service
// decided is in the stream before it records the decision. It is the
// JetStream adapter behind the planner's and executor's event ports.
type Outbox struct {
	pub *Publisher
	// sending orders what goes out: an Emit (its catch-up and its publish)
	// and a Flush each hold it, so an event emitted from another goroutine
	// (the nodes of a formula run at once) never overtakes the earlier
	// ones a catch-up is storing again.
	sending sync.Mutex
	mu      sync.Mutex
	pending []outgoing
	err     error
	// unsent: a pending event was not sent (Flush sends it); epoch: the
	// connection's reconnects when the first pending event was sent.
	unsent bool
	epoch  uint64
	// since: an earlier run of the unit may have stored what it emits
	// since then (Recheck).
	since time.Time
	// scans are the subjects read for events in doubt (held with sending).
	scans scans
}

type outgoing struct {
	future  jetstream.PubAckFuture
	sent    time.Time // when future's publish went out
	subject string
	data    []byte
	header  nats.Header
	msgID   string
	// doubt: an earlier copy may have been stored since then (zero:
	// none was sent before this one).
	doubt time.Time
}

// Outbox starts a unit of work's events.
func (p *Publisher) Outbox() *Outbox { return &Outbox{pub: p, scans: scans{}} }

// Recheck says that an earlier run of this unit of work (an earlier
// delivery of what it does, in this process or another) may have stored,
// since about since, events it is about to emit again. Each event emitted
// from now on is then looked for in its stream and sent only if it is not
// there, one after the other: JetStream's duplicate window drops a copy
// only while the first is younger than DuplicateWindow, and the earlier
// run may be older than that. The zero time turns it off.
func (o *Outbox) Recheck(since time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.since = time.Time{}
	if !since.IsZero() {
		o.since = since.Add(-ClockSkew)
	}
}

// Emit publishes an event under Nats-Msg-Id msgID, with the trace
// context of ctx in its headers (InjectTrace). A failure is reported by
// the next Flush. Past MaxOutboxPending publishes in flight, Emit first
// waits for them.
func (o *Outbox) Emit(ctx context.Context, subject string, pl events.Payload, msgID string) {
	msgID = o.pub.wireID(subject, msgID)
	data, _, err := o.pub.encode(pl, msgID)
	if err != nil {
		o.fail(err)
		return
	}
	h := InjectTrace(ctx, nil)
	o.sending.Lock()
	defer o.sending.Unlock()
	if o.behind() {
		o.fail(o.flush(ctx))
	}
	o.mu.Lock()
	if o.err != nil || !o.since.IsZero() {
		// What this unit emitted before could not be stored (or encoded):
		// its Flush fails and the unit is done again. Nothing is sent
		// after it, or it would be stored before (or without) the events
		// it follows. Or an earlier run may have stored it: the next Emit
		// (or Flush) looks for it first.
		o.pending = append(o.pending, outgoing{subject: subject, data: data, header: h, msgID: msgID, doubt: o.since})
		o.unsent = true
		o.mu.Unlock()
		return
	}
	if len(o.pending) == 0 {
		o.unsent, o.epoch = false, o.reconnects()
	}
	o.mu.Unlock()
	sent := time.Now()
	f, err := o.pub.JS.PublishMsgAsync(message(subject, data, h), jetstream.WithMsgID(msgID))
	o.mu.Lock()
	if err != nil {
		f, o.unsent = nil, true // not sent: Flush sends it, in turn
	}
	o.pending = append(o.pending, outgoing{future: f, sent: sent, subject: subject, data: data, header: h, msgID: msgID})
	full := len(o.pending) >= MaxOutboxPending
	o.mu.Unlock()
	if full {
		o.fail(o.flush(ctx))
	}
}

// behind says whether an earlier event may still be unstored in a way the
// next one would overtake: one was not sent, or the connection dropped
// (or is down) since the first unconfirmed one was sent, so it may have
// been lost in flight. The next event then waits for Flush to store the
// earlier ones, in order: a node's "succeeded" never lands before its
// "running".
func (o *Outbox) behind() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.pending) == 0 {
		return false
	}
	nc := o.pub.NC
	return o.unsent || nc != nil && (nc.Status() != nats.CONNECTED || nc.Stats().Reconnects != o.epoch)
}

// reconnects is how often the publisher's connection has reconnected.
func (o *Outbox) reconnects() uint64 {
	if o.pub.NC == nil {
		return 0
	}
	return o.pub.NC.Stats().Reconnects
}

func (o *Outbox) fail(err error) {
	if err == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		o.err = err
	}
}

// Flush waits until every event emitted so far is stored. One that failed
// is published again under its message id, with Publish's retries; one
// whose first try may have been stored all the same (no answer came) is
// first looked for in its stream, and not sent again once there, so the
// stream holds it once however late that copy was stored. If that fails
// too, Flush returns the first failure. Flush empties the outbox either
// way.
func (o *Outbox) Flush(ctx context.Context) error {
	o.sending.Lock()
	defer o.sending.Unlock()
	return o.flush(ctx)
}

// flush is Flush, its caller holding o.sending. The acknowledgements of
// what was sent are waited for PublishTimeout in all. Without a Recheck,
// the subjects read for events in doubt are those of this flush only: an
// outbox lives as long as its service (the planner's), and a scan of an
// earlier unit would be read on through everything stored on its subject
// since.
func (o *Outbox) flush(ctx context.Context) error {
	o.mu.Lock()
	pending, err := o.pending, o.err
	o.pending, o.err = nil, nil
	if o.since.IsZero() {
		o.scans = scans{}
	}
	o.mu.Unlock()
	deadline := time.Now().Add(PublishTimeout)
	for _, p := range pending {
		if err != nil {
			break
		}
		if err = o.store(ctx, p, deadline); err != nil {
			err = fmt.Errorf("publish on %s: %w", p.subject, o.pub.observe(p.subject, p.sent, err))
		}
	}
	return err
}

// store waits for an event's acknowledgement, or stores it again.
func (o *Outbox) store(ctx context.Context, p outgoing, deadline time.Time) error {
	if p.future != nil {
		ok, err := acked(ctx, p.future, deadline)
		if ok {
			return nil
		}
		if err == nil || mayBeStored(err) {
			o.scans.doubt(p.subject, p.sent.Add(-ClockSkew))
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !p.doubt.IsZero() {
		o.scans.doubt(p.subject, p.doubt)
	}
	return o.pub.send(ctx, p.subject, p.data, p.header, p.msgID, o.scans)
}

// acked waits, until deadline, for an asynchronous publish's
// acknowledgement: true when it came, else the error that came instead
// (nil: no answer).
func acked(ctx context.Context, f jetstream.PubAckFuture, deadline time.Time) (bool, error) {
	select {
	case <-f.Ok():
		return true, nil
	case err := <-f.Err():
		return false, err
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-f.Ok():
		return true, nil
	case err := <-f.Err():
		return false, err
	case <-ctx.Done():
	case <-t.C:
	}
	return false, nil
}
