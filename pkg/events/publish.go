package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// idSpace derives envelope ids from message ids, so the same transition
// published twice carries the same CloudEvents id.
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
}

func (p *Publisher) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now().UTC()
}

// Publish stores an event in JetStream with Nats-Msg-Id msgID (so a retried
// publish is stored once), retrying transient failures for a few seconds.
func (p *Publisher) Publish(ctx context.Context, subject string, pl Payload, msgID string) error {
	b, typ, err := p.encode(pl, msgID)
	if err != nil {
		return err
	}
	if err := p.send(ctx, subject, b, InjectTrace(ctx, nil), p.wireID(subject, msgID)); err != nil {
		return fmt.Errorf("publish %s on %s: %w", typ, subject, err)
	}
	return nil
}

// encode is the event's envelope, its id derived from msgID.
func (p *Publisher) encode(pl Payload, msgID string) ([]byte, Type, error) {
	env, err := NewAt(uuid.NewSHA1(idSpace, []byte(msgID)).String(), p.Source, p.now(), pl)
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
// re-creating a missing stream, with Heal) for a few seconds. Once the
// service is stopping (Stopping), a write JetStream cannot store is not
// tried again: the work is done again after the restart.
func (p *Publisher) send(ctx context.Context, subject string, b []byte, h nats.Header, msgID string) error {
	delay := 50 * time.Millisecond
	for try := 1; ; try++ {
		err := p.publishOnce(ctx, subject, b, h, msgID)
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
		delay = min(2*delay, time.Second)
	}
}

// PublishTimeout bounds one try of a publish waiting for its stream's
// acknowledgement.
const PublishTimeout = 5 * time.Second

func (p *Publisher) publishOnce(ctx context.Context, subject string, b []byte, h nats.Header, msgID string) error {
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	_, err := p.JS.PublishMsg(ctx, message(subject, b, h), jetstream.WithMsgID(msgID))
	return err
}

// observe is Storage.Observe of the publisher's JetStream when it is
// observed (ObserveJS), for a write it did not wait for itself.
func (p *Publisher) observe(subject string, sent time.Time, err error) error {
	if o, ok := p.JS.(observedJS); ok {
		return o.st.Observe(StreamOf(subject), sent, err)
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
// carry no trace context.
func (p *Publisher) Fire(subject string, pl Payload) {
	env, err := NewAt(uuid.NewString(), p.Source, p.now(), pl)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(env); err == nil {
			err = p.NC.Publish(subject, b)
		}
	}
	if err != nil && p.Log != nil {
		p.Log.Debug("output line not published", "subject", subject, "err", err)
	}
}
