// Package service wires the planner: the micro endpoints, the durable
// consumer of node, formula and health events, and resuming unfinished
// runs at start.
package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/planner/internal/api"
	"github.com/gantry-dev/gantry/services/planner/internal/engine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config of a planner.
type Config struct {
	Instance string
	Replicas int
	Log      *slog.Logger
	// Names names the public nkeys of known identities in audit records
	// whose credentials carry no name (nkeys, unlike user JWTs).
	Names map[string]string
}

// Run runs the planner until ctx is cancelled.
func Run(ctx context.Context, nc *nats.Conn, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	log := cfg.Log.With("service", "planner", "instance", cfg.Instance)
	js, err := events.Open(ctx, nc, events.Planner, cfg.Replicas)
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	e := &engine.Engine{Pub: &events.Publisher{JS: js, NC: nc, Source: cfg.Instance, Log: log}, Log: log, Names: cfg.Names}
	for bucket, dst := range map[string]*jetstream.KeyValue{events.BucketWorkflows: &e.Workflows, events.BucketRuns: &e.Runs, events.BucketState: &e.State, events.BucketNodes: &e.Nodes} {
		if *dst, err = js.KeyValue(ctx, bucket); err != nil {
			return fmt.Errorf("planner: bucket %s: %w", bucket, err)
		}
	}
	if err := e.Resume(ctx); err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	svc, err := api.Register(nc, e, log, func(id string) {
		if err := e.Start(context.WithoutCancel(ctx), id); err != nil {
			log.Error("start failed; the run resumes when the planner restarts", "workflow_id", id, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("planner: micro: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	cons, err := js.Consumer(ctx, events.StreamEvents, events.ConsumerPlanner)
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	log.Info("planner started")
	return consume.RunBatch(ctx, cons, e.HandleBatch, consume.Options{Name: "planner", Prefetch: events.PlannerPrefetch, AckWait: events.EventAckWait, Logger: log})
}
