// Package service wires the state-store: a durable consumer of every event
// projecting into KV, and the state.* micro endpoints.
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
	js, err := events.Open(ctx, nc, cfg.Replicas)
	if err != nil {
		return fmt.Errorf("state-store: %w", err)
	}
	kv, err := js.KeyValue(ctx, events.BucketState)
	if err != nil {
		return fmt.Errorf("state-store: %w", err)
	}
	p := &project.Projector{Store: project.KVStore{KV: kv}, Log: log}
	svc, err := api.Register(nc, kv, log, func(ctx context.Context, checkOnly bool) (*project.RebuildReport, error) {
		return p.Rebuild(ctx, js, kv, checkOnly)
	})
	if err != nil {
		return fmt.Errorf("state-store: micro: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	cons, err := js.Consumer(ctx, events.StreamEvents, events.ConsumerStateStore)
	if err != nil {
		return fmt.Errorf("state-store: %w", err)
	}
	log.Info("state-store started")
	return consume.Run(ctx, cons, p.Handle, consume.Options{Name: "state-store", Concurrency: 1, AckWait: events.EventAckWait, Logger: log})
}
