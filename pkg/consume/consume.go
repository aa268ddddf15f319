// Package consume runs JetStream pull consumers with one handler shape,
// func(ctx, *Event) error, and one adapter that maps the handler's result
// to the message's fate: nil acks; an error wrapping ErrPoison,
// events.ErrMalformed or events.ErrUnknownType terminates (it will never
// get better); any other error naks with a growing delay. While a handler
// runs, the adapter sends InProgress so long work is not redelivered.
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrPoison marks input that no retry can fix.
var ErrPoison = errors.New("poison message")

// Poison wraps err so the message is terminated, not redelivered.
func Poison(err error) error { return fmt.Errorf("%w: %w", ErrPoison, err) }

// Event is one delivered message, its envelope already parsed.
type Event struct {
	*events.Envelope
	Subject   string
	Stream    uint64 // stream sequence: the same on every redelivery
	Delivered uint64 // 1 on first delivery
	msg       jetstream.Msg
}

// InProgress tells the server the handler is still working.
func (e *Event) InProgress() error { return e.msg.InProgress() }

// Handler handles one event.
type Handler func(ctx context.Context, ev *Event) error

// Options tune a consumer loop.
type Options struct {
	Name        string        // for logs
	Concurrency int           // handlers running at once (default 1: in order)
	AckWait     time.Duration // the consumer's AckWait; InProgress every third of it
	Logger      *slog.Logger
	// stopping is closed when Run is asked to stop.
	stopping <-chan struct{}
	// Prefetch is how many messages are pulled ahead of the handlers
	// (default 2*Concurrency). A one-at-a-time consumer whose consumer
	// allows many unacknowledged messages can take them in larger pulls.
	Prefetch int
	// NakDelay is the redelivery delay after the n-th failed delivery
	// (default: 250ms doubling, capped at 30s).
	NakDelay func(delivered uint64) time.Duration
}

func defaultNakDelay(n uint64) time.Duration {
	d := 250 * time.Millisecond
	for i := uint64(1); i < n && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// Run consumes until ctx is cancelled, then stops fetching, waits for the
// handlers in flight to finish (their messages are acked or naked as
// usual) and returns.
func Run(ctx context.Context, cons jetstream.Consumer, h Handler, o Options) error {
	if o.Concurrency < 1 {
		o.Concurrency = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.NakDelay == nil {
		o.NakDelay = defaultNakDelay
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	// A short pull expiry: a consumer at its MaxAckPending limit resumes
	// delivery only on a new pull request, and nats.go re-pulls when one
	// expires (30 s by default), which showed as 30 s stalls under load.
	if o.Prefetch < 1 {
		o.Prefetch = 2 * o.Concurrency
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(o.Prefetch), jetstream.PullExpiry(2*time.Second))
	if err != nil {
		return fmt.Errorf("%s: consume: %w", o.Name, err)
	}
	o.stopping = ctx.Done()
	go func() {
		<-ctx.Done()
		iter.Drain()
	}()
	// Handlers get their own context: cancelling ctx stops fetching, but
	// work in flight finishes (drain), as a SIGTERM should.
	hctx := context.WithoutCancel(ctx)
	sem := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		msg, err := iter.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return nil
			}
			o.Logger.Warn("fetch failed", "consumer", o.Name, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			handle(hctx, msg, h, o)
		}()
	}
}

func (o Options) draining() bool {
	select {
	case <-o.stopping:
		return true
	default:
		return false
	}
}

// handle runs one message through the handler and settles it.
func handle(ctx context.Context, msg jetstream.Msg, h Handler, o Options) {
	meta, err := msg.Metadata()
	if err != nil {
		o.Logger.Error("message without metadata", "consumer", o.Name, "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	log := o.Logger.With("consumer", o.Name, "subject", msg.Subject(), "stream_seq", meta.Sequence.Stream, "delivered", meta.NumDelivered)
	env, err := events.Parse(msg.Data())
	if err != nil {
		settle(msg, err, meta.NumDelivered, o.draining(), log, o)
		return
	}
	ev := &Event{Envelope: env, Subject: msg.Subject(), Stream: meta.Sequence.Stream, Delivered: meta.NumDelivered, msg: msg}
	done := make(chan struct{})
	go func() { // keep long work from being redelivered
		t := time.NewTicker(o.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	err = safeCall(ctx, h, ev)
	close(done)
	settle(msg, err, meta.NumDelivered, o.draining(), log, o)
}

// safeCall turns a handler panic into a poison error: one bad message must
// not take the service down.
func safeCall(ctx context.Context, h Handler, ev *Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Poison(fmt.Errorf("handler panic: %v", r))
		}
	}()
	return h(ctx, ev)
}

func settle(msg jetstream.Msg, err error, delivered uint64, draining bool, log *slog.Logger, o Options) {
	switch {
	case err == nil && !draining:
		if aerr := msg.Ack(); aerr != nil {
			log.Warn("ack failed; the message will be redelivered (handlers are idempotent)", "err", aerr)
		}
	case err == nil:
		// Shutting down: wait for the server to confirm, so work done is
		// not redone because its ack was lost with the process.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if aerr := msg.DoubleAck(ctx); aerr != nil {
			log.Warn("ack not confirmed; the message may be redelivered (handlers are idempotent)", "err", aerr)
		}
	case errors.Is(err, ErrPoison), errors.Is(err, events.ErrMalformed), errors.Is(err, events.ErrUnknownType):
		log.Error("terminating poison message", "err", err)
		_ = msg.TermWithReason(truncate(err.Error(), 200))
	default:
		d := o.NakDelay(delivered)
		log.Warn("handler failed; redelivering", "err", err, "delay", d)
		_ = msg.NakWithDelay(d)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
