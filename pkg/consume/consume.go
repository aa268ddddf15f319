// Package consume runs JetStream pull consumers with one handler shape,
// func(ctx, *Event) error, and one adapter that maps the handler's result
// to the message's fate: nil acks; an error wrapping ErrPoison,
// events.ErrMalformed or events.ErrUnknownType terminates (it will never
// get better); an error JetStream's storage caused (eventbus.IsStorage: a
// write it could not store) runs the handler again in place, keeping the
// message, until it stores or the consumer stops; any other error naks
// with a growing delay. While a handler
// runs, the adapter sends InProgress so long work is not redelivered, and a
// message delivered again meanwhile (by a re-created consumer) waits for
// that handler and shares its result instead of running a second time.
package consume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
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
	// Header is the message's NATS headers (the trace context travels in
	// them: eventbus.ExtractTrace).
	Header nats.Header
	msg    jetstream.Msg
}

// InProgress tells the server the handler is still working (a no-op for
// an event from Follow, which has no acks).
func (e *Event) InProgress() error {
	if e.msg == nil {
		return nil
	}
	return e.msg.InProgress()
}

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
	// Linger is how long a batch consumer (RunBatch, Follow) waits for
	// more messages after the first of a batch, so that work nobody waits
	// for is done in fewer, larger batches (default 0: what is there).
	Linger time.Duration
	// NakDelay is the redelivery delay after the n-th failed delivery
	// (default: 250ms doubling, capped at 30s).
	NakDelay func(delivered uint64) time.Duration
	// Skip, when set, names the event types the handler does nothing
	// with: a message whose type (events.PeekType) it says yes to is
	// acknowledged unread, neither decoded nor checked, so neither logged
	// nor counted as refused when it came on a subject not its type's
	// (Run, RunBatch; not Follow). A message whose type cannot be peeked
	// is read in full.
	Skip func(events.Type) bool
	// Repair, when set, re-creates what was found missing (deleted by
	// someone with the rights to) and returns the durable consumer to go
	// on with: when the consumer or its stream is gone (Run, RunBatch go
	// on pulling from the new one), and when a handler fails because a
	// stream or bucket it needs is gone (the message is then redelivered).
	Repair func(ctx context.Context) (jetstream.Consumer, error)
}

func defaultNakDelay(n uint64) time.Duration {
	d := 250 * time.Millisecond
	for i := uint64(1); i < n && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// start applies the defaults and starts pulling; the puller drains
// when ctx is cancelled.
func start(ctx context.Context, cons jetstream.Consumer, o Options) (*puller, Options, error) {
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
	if o.Prefetch < 1 {
		o.Prefetch = 2 * o.Concurrency
	}
	o.stopping = ctx.Done()
	p := &puller{ctx: ctx, o: o, cons: cons}
	if err := p.open(); err != nil {
		return nil, o, fmt.Errorf("%s: consume: %w", o.Name, err)
	}
	go func() {
		<-ctx.Done()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.iter.Drain()
	}()
	return p, o, nil
}

// puller pulls from a consumer, and from a re-created one when it is
// found gone (Options.Repair).
type puller struct {
	ctx  context.Context
	o    Options
	cons jetstream.Consumer
	mu   sync.Mutex // guards iter
	iter jetstream.MessagesContext
}

// open starts pulling. A short pull expiry: a consumer at its
// MaxAckPending limit resumes delivery only on a new pull request, and
// nats.go re-pulls when one expires (30 s by default), which showed as
// 30 s stalls under load.
func (p *puller) open() error {
	iter, err := p.cons.Messages(jetstream.PullMaxMessages(p.o.Prefetch), jetstream.PullExpiry(2*time.Second))
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		iter.Drain()
	}
	p.iter = iter
	return nil
}

func (p *puller) current() jetstream.MessagesContext {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.iter
}

// next returns the next message; false once the consumer is stopped.
func (p *puller) next() (jetstream.Msg, bool) {
	for {
		msg, err := p.current().Next()
		if err == nil {
			return msg, true
		}
		if p.ctx.Err() != nil {
			return nil, false
		}
		if p.o.Repair != nil && p.gone(err) {
			p.o.Logger.Warn("consumer gone; re-creating it", "consumer", p.o.Name, "err", err)
			if !p.reopen() {
				return nil, false
			}
			continue
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil, false
		}
		p.o.Logger.Warn("fetch failed", "consumer", p.o.Name, "err", err)
		select {
		case <-p.ctx.Done():
			return nil, false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// gone says whether err (or, after missed heartbeats, the consumer's
// info) shows the consumer or its stream deleted. An iterator the client
// closed while not stopping has lost its consumer too.
func (p *puller) gone(err error) bool {
	if eventbus.IsMissing(err) || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		return true
	}
	if errors.Is(err, jetstream.ErrNoHeartbeat) {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		defer cancel()
		_, ierr := p.cons.Info(ctx)
		return eventbus.IsMissing(ierr)
	}
	return false
}

// reopen repairs and pulls from the new consumer, trying again with a
// growing delay; false when stopped first.
func (p *puller) reopen() bool {
	delay := 100 * time.Millisecond
	for {
		cons, err := p.o.Repair(p.ctx)
		if err == nil {
			p.current().Stop()
			p.cons = cons
			if err = p.open(); err == nil {
				return true
			}
		}
		p.o.Logger.Error("cannot re-create the consumer yet", "consumer", p.o.Name, "err", err, "retry_in", delay)
		select {
		case <-p.ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// Run consumes until ctx is cancelled, then stops fetching, waits for the
// handlers in flight to finish (their messages are acked or naked as
// usual) and returns.
func Run(ctx context.Context, cons jetstream.Consumer, h Handler, o Options) error {
	src, o, err := start(ctx, cons, o)
	if err != nil {
		return err
	}
	// Handlers get their own context: cancelling ctx stops fetching, but
	// work in flight finishes (drain), as a SIGTERM should. It says when
	// the service is stopping (eventbus.Stopping), to give up waits on
	// storage.
	hctx := eventbus.WithStopping(context.WithoutCancel(ctx), ctx.Done())
	sem := make(chan struct{}, o.Concurrency)
	fl := &flights{m: map[string]*flight{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		msg, ok := src.next()
		if !ok {
			return nil
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			handle(hctx, msg, h, o, fl)
		}()
	}
}

// flights lets one handler at a time work on a message. A message
// delivered again while its handler still runs here (its durable consumer
// was deleted and re-created, and the new one delivers it afresh) waits
// for that handler and is settled with its result, instead of doing the
// same work a second time alongside it.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done chan struct{}
	err  error
}

// do runs fn unless the message key is already being handled; then it
// waits for that handler's result, and joined is true.
func (f *flights) do(key string, fn func() error) (err error, joined bool) {
	f.mu.Lock()
	if fl, ok := f.m[key]; ok {
		f.mu.Unlock()
		<-fl.done
		return fl.err, true
	}
	fl := &flight{done: make(chan struct{})}
	f.m[key] = fl
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.m, key)
		f.mu.Unlock()
		close(fl.done)
	}()
	fl.err = fn()
	return fl.err, false
}

// flightKey identifies a message's work: its Nats-Msg-Id, else its
// subject and content (stream sequences start again in a re-created
// stream, so they do not tell two messages apart).
func flightKey(msg jetstream.Msg) string {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return "id:" + id
	}
	sum := sha256.Sum256(msg.Data())
	return "data:" + msg.Subject() + ":" + hex.EncodeToString(sum[:])
}

// BatchHandler handles, in order, the events that were delivered together
// and returns one result per event, with Handler's meaning. It lets a
// handler make the batch's effects durable once (one write per document
// touched, publishes waited for together) before any of them is acked;
// a failure it cannot pin on one event is every event's result.
type BatchHandler func(ctx context.Context, evs []*Event) []error

// RunBatch is Run for a BatchHandler, one batch at a time: each batch is
// every message already pulled (at most Prefetch), so a busy consumer gets
// large batches and an idle one handles each event as it arrives.
func RunBatch(ctx context.Context, cons jetstream.Consumer, h BatchHandler, o Options) error {
	o.Concurrency = 1
	src, o, err := start(ctx, cons, o)
	if err != nil {
		return err
	}
	hctx := eventbus.WithStopping(context.WithoutCancel(ctx), ctx.Done())
	batches(src, o, func(batch []jetstream.Msg) { handleBatch(hctx, batch, h, o) })
	return nil
}

// batches hands f every message already pulled (at least one, at most
// o.Prefetch) at a time, in delivery order, until the iterator stops.
func batches(src *puller, o Options, f func([]jetstream.Msg)) {
	msgs := make(chan jetstream.Msg, o.Prefetch)
	go func() {
		defer close(msgs)
		for {
			msg, ok := src.next()
			if !ok {
				return
			}
			msgs <- msg
		}
	}()
	batch := make([]jetstream.Msg, 0, o.Prefetch)
	var linger *time.Timer
	if o.Linger > 0 {
		linger = time.NewTimer(o.Linger)
	}
	for msg := range msgs {
		batch = append(batch[:0], msg)
		var waited <-chan time.Time // nil (no wait) without a linger
		if linger != nil {
			linger.Reset(o.Linger)
			waited = linger.C
		}
	more:
		for len(batch) < o.Prefetch {
			select {
			case m, ok := <-msgs:
				if !ok {
					break more
				}
				batch = append(batch, m)
				continue
			default:
			}
			if waited == nil {
				break
			}
			select {
			case m, ok := <-msgs:
				if !ok {
					break more
				}
				batch = append(batch, m)
			case <-waited:
				break more
			}
		}
		f(batch)
	}
}

// handleBatch parses a batch, runs the handler on the events that parse,
// and settles every message.
func handleBatch(ctx context.Context, msgs []jetstream.Msg, h BatchHandler, o Options) {
	evs := make([]*Event, 0, len(msgs))
	logs := make([]msgLogger, 0, len(msgs))
	for _, msg := range msgs {
		if ev, log, ok := parse(msg, o); ok {
			evs = append(evs, ev)
			logs = append(logs, log)
		}
	}
	if len(evs) == 0 {
		return
	}
	stop := keepInProgress(o.AckWait, func() {
		for _, ev := range evs {
			_ = ev.msg.InProgress()
		}
	})
	errs := batchUntilStored(ctx, h, evs, o)
	stop()
	for i, ev := range evs {
		settle(ev.msg, errs[i], ev.Delivered, o.draining(), logs[i], o)
	}
}

// batchUntilStored handles a batch, then again the events whose handling
// failed for reasons of storage, in place (untilStored), until none does
// or the consumer stops.
func batchUntilStored(ctx context.Context, h BatchHandler, evs []*Event, o Options) []error {
	errs := safeBatch(ctx, h, evs)
	delay := StorageRetry
	for tries := 1; !o.draining(); tries++ {
		var again []int
		for i, err := range errs {
			if eventbus.IsStorage(err) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		if tries == 1 {
			o.Logger.Warn("JetStream cannot store what handling these messages wrote; handling them again here until it can (their deliveries are not used up)",
				"consumer", o.Name, "messages", len(again), "err", errs[again[0]])
		}
		if !storageWait(o, delay) {
			break
		}
		delay = min(2*delay, StorageRetryMax)
		sub := make([]*Event, len(again))
		for j, i := range again {
			sub[j] = evs[i]
		}
		for j, err := range safeBatch(ctx, h, sub) {
			errs[again[j]] = err
		}
	}
	return errs
}

// safeBatch is safeCall for a batch. After a panic in a batch of several
// events, each event is handled again on its own, so that only the one
// that panics is terminated (the handler must drop what the aborted batch
// left applied but not recorded).
func safeBatch(ctx context.Context, h BatchHandler, evs []*Event) []error {
	errs, panicked := callBatch(ctx, h, evs)
	if panicked == nil {
		return errs
	}
	if len(evs) == 1 {
		return []error{Poison(fmt.Errorf("handler panic: %v", panicked))}
	}
	errs = make([]error, len(evs))
	for i, ev := range evs {
		errs[i] = safeBatch(ctx, h, []*Event{ev})[0]
	}
	return errs
}

func callBatch(ctx context.Context, h BatchHandler, evs []*Event) (errs []error, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			errs, panicked = nil, r
		}
	}()
	errs = h(ctx, evs)
	if len(errs) != len(evs) {
		return nil, fmt.Sprintf("batch handler returned %d results for %d events", len(errs), len(evs))
	}
	return errs, nil
}

// keepInProgress calls inProgress every third of ackWait until stopped,
// from a timer: most work ends long before the first call.
func keepInProgress(ackWait time.Duration, inProgress func()) (stop func()) {
	var mu sync.Mutex
	done := false
	var t *time.Timer
	t = time.AfterFunc(ackWait/3, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			inProgress()
			t.Reset(ackWait / 3)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		done = true
		t.Stop()
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

// parse reads a message's metadata and envelope. A message that has
// neither is settled here (terminated: it can never be handled), and ok
// is false.
func parse(msg jetstream.Msg, o Options) (*Event, msgLogger, bool) {
	meta, err := msg.Metadata()
	if err != nil {
		o.Logger.Error("message without metadata", "consumer", o.Name, "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return nil, msgLogger{}, false
	}
	log := msgLogger{o.Logger, o.Name, msg.Subject(), meta.Sequence.Stream, meta.NumDelivered}
	if o.Skip != nil {
		if t, ok := events.PeekType(msg.Data()); ok && o.Skip(t) {
			// A plain ack, even while draining: nothing was done that a
			// redelivery would do again, and the batch's own events must
			// not wait behind confirmations of these.
			if err := msg.Ack(); err != nil {
				log.get().Debug("ack of a message passed by failed; it will come again", "err", err)
			}
			return nil, log, false
		}
	}
	env, err := events.Parse(msg.Data())
	if err != nil {
		settle(msg, err, meta.NumDelivered, o.draining(), log, o)
		return nil, log, false
	}
	if !admit(o, msg.Subject(), meta.Sequence.Stream, env) {
		_ = msg.TermWithReason("refused: not from where its type comes")
		return nil, log, false
	}
	return &Event{Envelope: env, Subject: msg.Subject(), Stream: meta.Sequence.Stream, Delivered: meta.NumDelivered, Header: msg.Headers(), msg: msg}, log, true
}

// handle runs one message through the handler (or, delivered again while
// its handler runs, waits for that one: flights) and settles it.
func handle(ctx context.Context, msg jetstream.Msg, h Handler, o Options, fl *flights) {
	ev, log, ok := parse(msg, o)
	if !ok {
		return
	}
	// Keep long work from being redelivered.
	stop := keepInProgress(o.AckWait, func() { _ = msg.InProgress() })
	err, joined := fl.do(flightKey(msg), func() error {
		return untilStored(ctx, o, log, func() error { return safeCall(ctx, h, ev) })
	})
	stop()
	if joined {
		log.get().Info("delivered again while its handler ran here: settled with that handler's result", "err", err)
	}
	settle(msg, err, ev.Delivered, o.draining(), log, o)
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

// msgLogger builds the message's logger only when something is logged:
// most messages log nothing, and slog.With formats its attributes at once.
type msgLogger struct {
	l         *slog.Logger
	consumer  string
	subject   string
	seq       uint64
	delivered uint64
}

func (m msgLogger) get() *slog.Logger {
	return m.l.With("consumer", m.consumer, "subject", m.subject, "stream_seq", m.seq, "delivered", m.delivered)
}

func settle(msg jetstream.Msg, err error, delivered uint64, draining bool, ml msgLogger, o Options) {
	switch {
	case err == nil && !draining:
		if aerr := msg.Ack(); aerr != nil {
			ml.get().Warn("ack failed; the message will be redelivered (handlers are idempotent)", "err", aerr)
		}
	case err == nil:
		// Shutting down: wait for the server to confirm, so work done is
		// not redone because its ack was lost with the process.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if aerr := msg.DoubleAck(ctx); aerr != nil {
			ml.get().Warn("ack not confirmed; the message may be redelivered (handlers are idempotent)", "err", aerr)
		}
	case errors.Is(err, ErrPoison), errors.Is(err, events.ErrMalformed), errors.Is(err, events.ErrUnknownType):
		ml.get().Error("terminating poison message", "err", err)
		_ = msg.TermWithReason(truncate(err.Error(), 200))
	default:
		if eventbus.IsMissing(err) && o.Repair != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, rerr := o.Repair(ctx); rerr != nil {
				ml.get().Error("cannot re-create what the handler needs", "err", rerr)
			}
			cancel()
		}
		d := o.NakDelay(delivered)
		ml.get().Warn("handler failed; redelivering", "err", err, "delay", d)
		_ = msg.NakWithDelay(d)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
