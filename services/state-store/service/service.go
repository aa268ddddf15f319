// Package service wires the state-store: it follows the event stream in
// order from its checkpoint, projecting into KV, and serves the state.*
// micro endpoints.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/api"
	"github.com/gantry-dev/gantry/services/state-store/internal/lag"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config of a state-store.
type Config struct {
	Instance string
	Replicas int
	Log      *slog.Logger
}

// Run runs the state-store until ctx is cancelled.
func Run(ctx context.Context, nc *nats.Conn, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	log := cfg.Log.With("service", "state-store", "instance", cfg.Instance)
	js, err := eventbus.Open(ctx, nc, events.StateStore, cfg.Replicas, log)
	if err != nil {
		return fmt.Errorf("state-store: %w", err)
	}
	storage := consume.NewStorage(nc, log)
	js = eventbus.ObserveJS(js, storage)
	kv, err := js.KeyValue(ctx, events.BucketState)
	if err != nil {
		return fmt.Errorf("state-store: %w", err)
	}
	heal := &eventbus.Healer{JS: js, ID: events.StateStore, Replicas: cfg.Replicas, Log: log}
	go heal.Watch(ctx)
	nodes, err := eventbus.NewBucket[events.NodeRecord](ctx, js, events.BucketNodes)
	if err != nil {
		return fmt.Errorf("state-store: %w", err)
	}
	store := &project.KVStore{JS: js, KV: kv, Storage: storage}
	p := &project.Projector{Store: store, Log: log, Checkpoint: project.CheckpointKey, Heal: heal.Heal, Records: nodes, Hold: WriteHold}
	meter := &lag.Meter{Instance: cfg.Instance, Applied: p.Applied, LastSeq: func(ctx context.Context) (uint64, error) {
		s, err := js.Stream(ctx, events.StreamEvents)
		if err != nil {
			return 0, err
		}
		return s.CachedInfo().State.LastSeq, nil
	}}
	go meter.Watch(ctx)
	spec := eventbus.ServiceSpec{Version: buildinfo.Version(), Instance: cfg.Instance, Storage: storage, Status: func() any {
		st := meter.Status(ctx)
		st.Storage = storage.Status()
		return st
	}}
	svc, err := api.Register(nc, spec, store, log, func(ctx context.Context, checkOnly bool) (*project.RebuildReport, error) {
		return p.Rebuild(ctx, js, kv, checkOnly)
	}, func(ctx context.Context) error { return p.CatchUp(ctx, js) })
	if err != nil {
		return fmt.Errorf("state-store: micro: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	from, err := p.Resume(ctx)
	if err != nil {
		return fmt.Errorf("state-store: %w", err)
	}
	log.Info("state-store started", "from_seq", from)
	f := &follower{js: js, kv: kv, p: p, log: log}
	return f.run(ctx, from)
}

// WriteHold is how long the projection's writes wait for the next
// events' before they are made: a document that the events of that time
// change several times (a formula's ready, running and succeeded; the
// checkpoint) is written once. Nothing waits for them but the
// state-store's own reads, which have them written at once; the events
// are in the stream, and the checkpoint follows the writes, so a crash
// meanwhile applies them again.
const WriteHold = time.Second

// follower follows the event stream, and starts again from the first
// event of a re-created one: a stream deleted and created again numbers
// its events from 1, below the checkpoint, so the projection is rebased
// (Projector.Rebase) instead of waiting for sequences it already saw.
type follower struct {
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	p   *project.Projector
	log *slog.Logger
	// followFn replaces consume.Follow (tests).
	followFn func(ctx context.Context, from uint64) error
}

func (f *follower) run(ctx context.Context, from uint64) error {
	wait := followRetry
	for ctx.Err() == nil {
		next, err := f.round(ctx, from)
		if err == nil {
			from, wait = next, followRetry
			continue
		}
		if ctx.Err() != nil {
			break
		}
		// The bus or the stream is away (a quorum loss, a partition): the
		// projection waits for it, it does not end the state-store.
		from = max(from, f.p.Applied()+1)
		f.log.Warn("cannot follow the event stream; trying again", "stream", events.StreamEvents, "from_seq", from, "retry_in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, maxFollowRetry)
	}
	return nil
}

// followRetry and maxFollowRetry bound the waits between tries to follow
// the event stream again.
const (
	followRetry    = 500 * time.Millisecond
	maxFollowRetry = 10 * time.Second
)

// round follows the stream from from until it is re-created (then it
// returns the sequence to go on from, after a rebase) or following it
// fails (an error, nil once ctx ends).
func (f *follower) round(ctx context.Context, from uint64) (uint64, error) {
	created, first, last, err := f.stream(ctx)
	if err != nil {
		return 0, err
	}
	switch {
	case from > last+1:
		if from, err = f.rebase(ctx, from, last); err != nil {
			return 0, err
		}
	case from < first:
		f.skip(ctx, from, first)
		from = first
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	recreated := make(chan struct{})
	go f.watch(fctx, created, func() { close(recreated); stop() })
	err = f.follow(fctx, from)
	stop()
	select {
	case <-recreated:
		return f.rebase(ctx, from, 0)
	default:
	}
	if err == nil && ctx.Err() == nil {
		err = consume.ErrFollowEnded
	}
	return 0, err
}

// follow applies the stream from sequence from until ctx ends or the
// client stops delivering it.
func (f *follower) follow(ctx context.Context, from uint64) error {
	if f.followFn != nil {
		return f.followFn(ctx, from)
	}
	return consume.Follow(ctx, f.js, events.StreamEvents, from, f.p.Apply, consume.Options{Name: "state-store", Prefetch: eventbus.StateStorePrefetch, Linger: eventbus.StateStoreLinger, Logger: f.log})
}

// stream is the event stream's creation time and its first and last
// sequences.
func (f *follower) stream(ctx context.Context) (created time.Time, first, last uint64, err error) {
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

// watch calls gone once the event stream is not the one created at
// created (deleted, then created again).
func (f *follower) watch(ctx context.Context, created time.Time, gone func()) {
	t := time.NewTicker(eventbus.StreamWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, _, _, err := f.stream(ctx)
		if err == nil && !c.Equal(created) {
			gone()
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
