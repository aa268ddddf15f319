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
	store := &project.Pages{Raw: &project.KVStore{JS: js, KV: kv, Storage: storage}}
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
		return p.Rebuild(ctx, js, checkOnly)
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
