package eventbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// idSpace derives envelope ids from wire message ids (wireID), so the same
// transition published twice carries the same CloudEvents id, and no
// other identity can work it out ahead (a reader that skips an id it has
// seen would skip the real event after a forged one with its id).
var idSpace = uuid.MustParse("9f0c9d5e-1c7e-4b0a-9a57-5f8a3f2c7d10")

// Publisher publishes events of one source ("planner/host-1").
type Publisher struct {
	JS     jetstream.JetStream
	NC     *nats.Conn
	Source string
	Log    *slog.Logger
	// Now is the clock (tests set it).
	Now func() time.Time
	// Heal, when set, re-creates the stream a publish found missing
	// (Healer.Heal), and the publish is tried again.
	Heal func(ctx context.Context) error

	keyOnce sync.Once
	key     []byte // what message ids are keyed with (idKey)

	linesMu   sync.Mutex
	held      []heldLine // output lines fired while the connection was down
	heldBytes int
}

func (p *Publisher) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now().UTC()
}

// Publish stores an event in JetStream with Nats-Msg-Id msgID (so a retried
// publish is stored once), retrying transient failures for a few seconds.
func (p *Publisher) Publish(ctx context.Context, subject string, pl events.Payload, msgID string) error {
	wire := p.wireID(subject, msgID)
	b, typ, err := p.encode(pl, wire)
	if err != nil {
		return err
	}
	if err := p.send(ctx, subject, b, InjectTrace(ctx, nil), wire, scans{}); err != nil {
		return fmt.Errorf("publish %s on %s: %w", typ, subject, err)
	}
	return nil
}

// encode is the event's envelope, its id derived from its wire message id.
func (p *Publisher) encode(pl events.Payload, wire string) ([]byte, events.Type, error) {
	env, err := events.NewAt(uuid.NewSHA1(idSpace, []byte(wire)).String(), p.Source, p.now(), pl)
	if err != nil {
		return nil, "", err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return nil, env.Type, fmt.Errorf("encode %s: %w", env.Type, err)
	}
	return b, env.Type, nil
}

// send stores an encoded event, retrying transient failures (and
// re-creating a missing stream, with Heal) for a few seconds, and waiting
// for the connection while it is down. A try that may have been stored
// without the acknowledgement coming back puts the event in doubt in s:
// before the next try its stream is read for it, and it is not sent again
// once it is there (see ClockSkew).
func (p *Publisher) send(ctx context.Context, subject string, b []byte, h nats.Header, msgID string, s scans) error {
	delay := 50 * time.Millisecond
	for try := 1; ; try++ {
		err := p.sendOnce(ctx, subject, b, h, msgID, s)
		if err == nil || try == 8 || ctx.Err() != nil || IsStorage(err) && Stopping(ctx) {
			return err
		}
		// No stream answers: missing (or, when a plain subscriber also
		// listens on the subject, a timeout).
		if (IsMissing(err) || errors.Is(err, context.DeadlineExceeded)) && p.Heal != nil {
			if herr := p.Heal(ctx); herr != nil && p.Log != nil {
				p.Log.Error("cannot re-create what a publish needs", "subject", subject, "err", herr)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		waitConnected(ctx, p.conn())
		delay = min(2*delay, time.Second)
	}
}

// sendOnce is one try of send: nothing when the stream already holds an
// event in doubt, else one publish (of an event in doubt, on the condition
// that nothing was stored on its subject since the stream was read).
func (p *Publisher) sendOnce(ctx context.Context, subject string, b []byte, h nats.Header, msgID string, s scans) error {
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(msgID)}
	if s.inDoubt(subject) {
		found, last, err := p.stored(ctx, s, subject, msgID)
		if err != nil || found {
			return err
		}
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(last))
	}
	sent := time.Now()
	err := p.publishOnce(ctx, subject, b, h, opts...)
	if err != nil && mayBeStored(err) {
		s.doubt(subject, sent.Add(-ClockSkew))
	}
	return err
}

// mayBeStored says whether a publish that failed with err may have been
// stored all the same: anything but a publish never sent (no connection)
// or one no stream took.
func mayBeStored(err error) bool {
	return !errors.Is(err, nats.ErrReconnectBufExceeded) && !errors.Is(err, nats.ErrConnectionClosed) && !IsMissing(err)
}

// waitConnected waits, for at most PublishTimeout, until nc is connected,
// and says whether it is.
func waitConnected(ctx context.Context, nc *nats.Conn) bool {
	deadline := time.Now().Add(PublishTimeout)
	for nc != nil && nc.Status() != nats.CONNECTED && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	return nc == nil || nc.Status() == nats.CONNECTED
}

// whenConnected runs op, and again once nc is back (a few times at most),
// while op fails only because nc is disconnected: a service's connection
// keeps nothing to send while it is down (natsconn), so op sent nothing,
// where it used to wait in the connection's buffer for the reconnect.
func whenConnected(ctx context.Context, nc *nats.Conn, op func() error) error {
	for try := 1; ; try++ {
		err := op()
		if !errors.Is(err, nats.ErrReconnectBufExceeded) || try == 5 || ctx.Err() != nil || !waitConnected(ctx, nc) {
			return err
		}
	}
}

// WhenConnected is whenConnected, for the writes of other packages to
// JetStream that have no retry of their own (the executor's slots).
func WhenConnected(ctx context.Context, nc *nats.Conn, op func() error) error {
	return whenConnected(ctx, nc, op)
}

// PublishTimeout bounds one try of a publish waiting for its stream's
// acknowledgement.
const PublishTimeout = 5 * time.Second

func (p *Publisher) publishOnce(ctx context.Context, subject string, b []byte, h nats.Header, opts ...jetstream.PublishOpt) error {
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	_, err := p.JS.PublishMsg(ctx, message(subject, b, h), opts...)
	return err
}

// observe is Storage.Observe of the publisher's JetStream when it is
// observed (ObserveJS), for a write it did not wait for itself.
func (p *Publisher) observe(subject string, sent time.Time, err error) error {
	if o, ok := p.JS.(observedJS); ok {
		return o.st.Observe(events.StreamOf(subject), sent, err)
	}
	return err
}

// message is a NATS message; h may be nil (no headers besides the ones
// the publish options add).
func message(subject string, b []byte, h nats.Header) *nats.Msg {
	return &nats.Msg{Subject: subject, Data: b, Header: h}
}

// Fire publishes without waiting for storage (output lines): a lost line
// must never hold up or break the work that produced it. Output lines
// carry no trace context. Lines fired while the connection is down (a
// service's connection keeps nothing to send then) are held, up to
// MaxHeldLineBytes, and sent in order once it is back.
func (p *Publisher) Fire(subject string, pl events.Payload) {
	env, err := events.NewAt(uuid.NewString(), p.Source, p.now(), pl)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(env); err == nil {
			err = p.fire(subject, b)
		}
	}
	if err != nil && p.Log != nil {
		p.Log.Debug("output line not published", "subject", subject, "err", err)
	}
}

// MaxHeldLineBytes bounds the output lines a publisher holds while its
// connection is down; past it, lines are dropped.
const MaxHeldLineBytes = 8 << 20

type heldLine struct {
	subject string
	data    []byte
}

// fire publishes a line, or holds it behind the lines held already.
func (p *Publisher) fire(subject string, b []byte) error {
	p.linesMu.Lock()
	defer p.linesMu.Unlock()
	if len(p.held) == 0 {
		if err := p.NC.Publish(subject, b); !errors.Is(err, nats.ErrReconnectBufExceeded) {
			return err
		}
	}
	if p.heldBytes+len(b) > MaxHeldLineBytes {
		return fmt.Errorf("%d bytes of output lines held already: %w", p.heldBytes, nats.ErrReconnectBufExceeded)
	}
	p.held = append(p.held, heldLine{subject, b})
	p.heldBytes += len(b)
	if len(p.held) == 1 {
		go p.sendHeld()
	}
	return nil
}

// sendHeld sends the held lines, in order, once the connection is back,
// until none is left (or the connection is closed: they are dropped).
func (p *Publisher) sendHeld() {
	for {
		waitConnected(context.Background(), p.NC)
		p.linesMu.Lock()
		for len(p.held) > 0 {
			err := p.NC.Publish(p.held[0].subject, p.held[0].data)
			if errors.Is(err, nats.ErrReconnectBufExceeded) {
				break // down again
			}
			p.heldBytes -= len(p.held[0].data)
			p.held = p.held[1:]
		}
		if p.NC.IsClosed() || len(p.held) == 0 {
			p.held, p.heldBytes = nil, 0
		}
		done := len(p.held) == 0
		p.linesMu.Unlock()
		if done {
			return
		}
	}
}
