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
	env, err := NewAt(uuid.NewSHA1(idSpace, []byte(msgID)).String(), p.Source, p.now(), pl)
	if err != nil {
		return err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("encode %s: %w", env.Type, err)
	}
	delay := 50 * time.Millisecond
	for try := 1; ; try++ {
		err = p.publishOnce(ctx, subject, b, msgID)
		if err == nil || try == 8 || ctx.Err() != nil {
			break
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
	if err != nil {
		return fmt.Errorf("publish %s on %s: %w", env.Type, subject, err)
	}
	return nil
}

// PublishTimeout bounds one try of a publish waiting for its stream's
// acknowledgement.
const PublishTimeout = 5 * time.Second

func (p *Publisher) publishOnce(ctx context.Context, subject string, b []byte, msgID string) error {
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	_, err := p.JS.Publish(ctx, subject, b, jetstream.WithMsgID(msgID))
	return err
}

// PublishAsync stores an event without waiting for the acknowledgement;
// publishes on one connection keep their order in the stream. The caller
// must check the returned future (see Batch) before relying on it.
func (p *Publisher) PublishAsync(subject string, pl Payload, msgID string) (jetstream.PubAckFuture, error) {
	env, err := NewAt(uuid.NewSHA1(idSpace, []byte(msgID)).String(), p.Source, p.now(), pl)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", env.Type, err)
	}
	f, err := p.JS.PublishAsync(subject, b, jetstream.WithMsgID(msgID))
	if err != nil {
		return nil, fmt.Errorf("publish %s on %s: %w", env.Type, subject, err)
	}
	return f, nil
}

// Batch collects asynchronous publishes and waits for them together.
type Batch struct {
	mu      sync.Mutex
	futures []jetstream.PubAckFuture
	err     error
}

// Add records a publish (or its immediate error).
func (b *Batch) Add(f jetstream.PubAckFuture, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if b.err == nil {
			b.err = err
		}
		return
	}
	b.futures = append(b.futures, f)
}

// Wait returns the first failure among the publishes so far, waiting for
// each to be acknowledged.
func (b *Batch) Wait(ctx context.Context) error {
	b.mu.Lock()
	fs, err := b.futures, b.err
	b.futures = nil
	b.mu.Unlock()
	if err != nil {
		return err
	}
	for _, f := range fs {
		select {
		case <-f.Ok():
		case e := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, e)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return fmt.Errorf("publish %s: no acknowledgement in 30s", f.Msg().Subject)
		}
	}
	return nil
}

// Fire publishes without waiting for storage (output lines): a lost line
// must never hold up or break the work that produced it.
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
