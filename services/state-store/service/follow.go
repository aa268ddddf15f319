package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
	"github.com/nats-io/nats.go/jetstream"
)

// follower follows the event stream, and starts again from the first
// event of a re-created one: a stream deleted and created again numbers
// its events from 1, below the checkpoint, so the projection is rebased
// (Projector.Rebase) instead of waiting for sequences it already saw.
//
// It also follows again when its reader stalls: the stream holds events
// past the last one handed to the projection, and none came for
// StallAfter while the projection was not busy applying any. The reader
// is an ordered consumer, held by a single server (R1); when that server
// is cut off, the client re-creates it, retrying with its own timeouts
// and backoff, and says nothing while it does. A reader that received
// nothing for a whole 35 s partition of one NATS node was seen on the
// cluster stack, while the other services went on.
type follower struct {
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	p   *project.Projector
	log *slog.Logger
	// followFn replaces consume.Follow, streamFn the stream's info (tests).
	followFn func(ctx context.Context, from uint64) error
	streamFn func(ctx context.Context) (created time.Time, first, last uint64, err error)
	// created is when the event stream this follower followed was
	// created: a stream that ends below the checkpoint with the same
	// creation time was not re-created; the server that answered has not
	// caught up, for a moment. behindSince is when that was first seen;
	// past behindFor (BehindFor when 0) the stream did lose its end (a
	// server that lost writes it had not synced, a restore) and the
	// projection is rebased, as for a re-created one.
	created     time.Time
	behindSince time.Time
	behindFor   time.Duration
	// stallAfter (StallAfter when 0), watchEvery
	// (eventbus.StreamWatchInterval when 0), retry and maxRetry
	// (followRetry and maxFollowRetry when 0): tests make them short.
	stallAfter, watchEvery, retry, maxRetry time.Duration

	handed   atomic.Uint64 // the last stream sequence handed to the projection
	applying atomic.Bool   // a batch is in the projection's hands
	// delivered: the current round handed the projection events.
	delivered atomic.Bool
}

// StallAfter is how long the event stream's reader may deliver nothing
// while the stream holds events it has not delivered, before the
// state-store follows the stream again with a new reader.
const StallAfter = 10 * time.Second

// errStalled: the reader delivered nothing for StallAfter while the
// stream held events past it.
var errStalled = errors.New("the event stream's reader delivered nothing while the stream held more events")

func (f *follower) run(ctx context.Context, from uint64) error {
	var wait time.Duration
	for ctx.Err() == nil {
		next, err := f.round(ctx, from)
		if err == nil {
			from, wait = next, 0
			continue
		}
		if ctx.Err() != nil {
			break
		}
		// The bus or the stream is away (a quorum loss, a partition): the
		// projection waits for it, it does not end the state-store. It
		// goes on from where the round followed (a rebased projection
		// from the re-created stream's first event) or what the
		// projection has written past it.
		wait = f.nextWait(wait, f.delivered.Load())
		from = max(next, f.p.Applied()+1)
		f.log.Warn("cannot follow the event stream; trying again", "stream", events.StreamEvents, "from_seq", from, "retry_in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// nextWait is the wait before following again after a round that failed:
// the first wait after a round that handed events to the projection (the
// follow worked until the bus went away), else twice the wait before, up
// to the longest. Before, the waits of an earlier outage carried over: a
// reader lost in a partition after one in a quorum loss waited 10 s
// before each try, and the projection (gantry status) stood still for
// most of a 35 s partition while runs went on.
func (f *follower) nextWait(prev time.Duration, progressed bool) time.Duration {
	first, longest := cmp.Or(f.retry, followRetry), cmp.Or(f.maxRetry, maxFollowRetry)
	if progressed || prev == 0 {
		return first
	}
	return min(2*prev, longest)
}

// followRetry and maxFollowRetry bound the waits between tries to follow
// the event stream again.
const (
	followRetry    = 500 * time.Millisecond
	maxFollowRetry = 5 * time.Second
)

// round follows the stream from from until it is re-created (then it
// returns the sequence to go on from, after a rebase) or following it
// fails (an error, nil once ctx ends, with the sequence it followed from:
// from, or the first of a stream it found re-created).
func (f *follower) round(ctx context.Context, from uint64) (uint64, error) {
	f.delivered.Store(false)
	created, first, last, err := f.stream(ctx)
	if err != nil {
		return from, err
	}
	if from <= last+1 || !created.Equal(f.created) {
		f.behindSince = time.Time{}
	} else if f.behindSince.IsZero() {
		f.behindSince = time.Now()
	}
	switch {
	case !f.behindSince.IsZero() && time.Since(f.behindSince) < cmp.Or(f.behindFor, BehindFor):
		return from, fmt.Errorf("%w: it ends at sequence %d, the projection has applied up to %d", errBehind, last, from-1)
	case from > last+1:
		f.behindSince = time.Time{}
		next, err := f.rebase(ctx, from, last)
		if err != nil {
			return from, err
		}
		from = next
	case from < first:
		f.skip(ctx, from, first)
		from = first
	}
	f.created = created
	fctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	f.handed.Store(from - 1)
	go f.watch(fctx, created, stop)
	err = f.follow(fctx, from)
	stop(nil)
	switch cause := context.Cause(fctx); {
	case errors.Is(cause, errRecreated):
		next, err := f.rebase(ctx, from, 0)
		if err != nil {
			return from, err
		}
		return next, nil
	case errors.Is(cause, errStalled) && ctx.Err() == nil:
		return from, cause
	}
	if err == nil && ctx.Err() == nil {
		err = consume.ErrFollowEnded
	}
	return from, err
}

// errRecreated: the event stream was deleted and created again.
var errRecreated = errors.New("the event stream was re-created")

// BehindFor is how long the event stream may end below the projection's
// checkpoint, with the creation time the state-store followed, before it
// is taken for a stream that lost its end and the projection is rebased.
const BehindFor = 30 * time.Second

// errBehind: the event stream's info, from a server that has not caught
// up (one that rejoins after a partition answers for a moment as the
// leader it was), ends below what the projection applied. Taken for a
// re-created stream, it had the state-store rebase its projection.
var errBehind = errors.New("the event stream's info is behind the projection (a NATS server that has not caught up)")

// follow applies the stream from sequence from until ctx ends or the
// client stops delivering it.
func (f *follower) follow(ctx context.Context, from uint64) error {
	if f.followFn != nil {
		return f.followFn(ctx, from)
	}
	return consume.Follow(ctx, f.js, events.StreamEvents, from, f.apply, consume.Options{Name: "state-store", Prefetch: eventbus.StateStorePrefetch, Linger: eventbus.StateStoreLinger, Logger: f.log})
}

// apply hands a batch to the projection, noting what the stall check
// needs: the batch's last sequence, and whether one is in its hands.
func (f *follower) apply(ctx context.Context, evs []*consume.Event, last uint64) {
	f.applying.Store(true)
	defer f.applying.Store(false)
	f.handed.Store(last)
	f.delivered.Store(true)
	f.p.Apply(ctx, evs, last)
}

// stream is the event stream's creation time and its first and last
// sequences.
func (f *follower) stream(ctx context.Context) (created time.Time, first, last uint64, err error) {
	if f.streamFn != nil {
		return f.streamFn(ctx)
	}
	s, err := f.js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return time.Time{}, 0, 0, err
	}
	i := s.CachedInfo()
	return i.Created, i.State.FirstSeq, i.State.LastSeq, nil
}

// skip moves the projection past events removed from the stream (purged,
// or past its age limit) before it applied them: what they did is not
// projected, and a rebuild says so.
func (f *follower) skip(ctx context.Context, from, first uint64) {
	f.log.Warn("events were removed from the event stream before the projection applied them: what they did is not projected; following from the first event left",
		"stream", events.StreamEvents, "first_missing", from, "last_missing", first-1)
	if err := f.p.Skip(ctx, first-1); err != nil {
		f.log.Warn("checkpoint write failed; the next start skips the same events again", "err", err)
	}
}

// watch ends the follow (stop, with its cause) when the event stream is
// re-created (errRecreated) or when its reader stalls (errStalled; see
// follower).
func (f *follower) watch(ctx context.Context, created time.Time, stop context.CancelCauseFunc) {
	every, stallAfter := cmp.Or(f.watchEvery, eventbus.StreamWatchInterval), cmp.Or(f.stallAfter, StallAfter)
	t := time.NewTicker(every)
	defer t.Stop()
	seen, since := f.handed.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, _, last, err := f.stream(ctx)
		if err != nil {
			continue
		}
		if !c.Equal(created) {
			stop(errRecreated)
			return
		}
		handed := f.handed.Load()
		if handed != seen || last <= handed || f.applying.Load() {
			seen, since = handed, time.Now()
			continue
		}
		if waited := time.Since(since); waited >= stallAfter {
			f.log.Warn("the event stream's reader delivered nothing while the stream holds more events; following it again with a new reader",
				"stream", events.StreamEvents, "handed_seq", handed, "last_seq", last, "waited", waited.Round(time.Millisecond).String())
			stop(errStalled)
			return
		}
	}
}

func (f *follower) rebase(ctx context.Context, from, last uint64) (uint64, error) {
	f.log.Warn("the event stream was re-created: its sequences start again below the checkpoint; rebasing the projection and following it from its first event",
		"stream", events.StreamEvents, "checkpoint", from-1, "last_seq", last)
	n, err := f.p.Rebase(ctx, f.kv)
	if err != nil {
		return 0, fmt.Errorf("state-store: %w", err)
	}
	f.log.Info("projection rebased", "documents", n)
	return 1, nil
}
