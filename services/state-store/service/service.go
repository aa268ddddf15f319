// Package service wires the state-store: it follows the event stream in
// order from its checkpoint, projecting into KV, and serves the state.*
// micro endpoints.
package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/api"
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
	js, err := events.Open(ctx, nc, events.StateStore, cfg.Replicas)
	if err != nil {
		return fmt.Errorf("state-store: %w", err)
	}
	kv, err := js.KeyValue(ctx, events.BucketState)
	if err != nil {
		return fmt.Errorf("state-store: %w", err)
	}
	heal := &events.Healer{JS: js, ID: events.StateStore, Replicas: cfg.Replicas, Log: log}
	p := &project.Projector{Store: &project.KVStore{JS: js, KV: kv}, Log: log, Checkpoint: events.StateCheckpointKey, Heal: heal.Heal}
	svc, err := api.Register(nc, kv, log, func(ctx context.Context, checkOnly bool) (*project.RebuildReport, error) {
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
	return consume.Follow(ctx, js, events.StreamEvents, from, p.Apply, consume.Options{Name: "state-store", Prefetch: events.StateStorePrefetch, Linger: events.StateStoreLinger, Logger: log})
}
