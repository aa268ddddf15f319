// Package service wires the executor: it consumes formula-ready work from
// decky.*.dispatch (one durable consumer shared by every replica) and runs
// each formula on its host. main.go and `gantry dev` both start it.
package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/secrets"
	"github.com/gantry-dev/gantry/services/executor/internal/formula"
	"github.com/nats-io/nats.go"
)

// Config of an executor.
type Config struct {
	Instance    string               // "executor/<host>-<pid>": the actor named in events
	Replicas    int                  // stream replicas (1 for a single server)
	Hosts       hostexec.HostsConfig // SSH, and whether transport local is allowed
	SecretsDir  string               // --secrets-dir: where the secrets commands name are read
	MaxFormulas int                  // formulas running at once in this executor (default 64)
	PerHost     int                  // nodes running at once per host (default 8)
	Log         *slog.Logger
}

// Run runs the executor until ctx is cancelled, then finishes the formulas
// in flight and returns.
func Run(ctx context.Context, nc *nats.Conn, cfg Config) error {
	if cfg.MaxFormulas <= 0 {
		cfg.MaxFormulas = 64
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	log := cfg.Log.With("service", "executor", "instance", cfg.Instance)
	if cfg.Hosts.SSH.Logger == nil {
		cfg.Hosts.SSH.Logger = log
	}
	sec, err := secrets.Open(cfg.SecretsDir)
	if err != nil {
		return fmt.Errorf("%s: %w", "executor", err)
	}
	js, err := events.Open(ctx, nc, events.Executor, cfg.Replicas)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	heal := &events.Healer{JS: js, ID: events.Executor, Replicas: cfg.Replicas, Log: log}
	go heal.Watch(ctx)
	records, err := events.NewBucket[formula.Record](ctx, js, events.BucketNodes)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	cons, err := js.Consumer(ctx, events.StreamDispatch, events.ConsumerExecutor)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	hosts := hostexec.NewHosts(cfg.Hosts)
	defer hosts.Close()
	runs, err := events.NewBucket[events.RunSnapshot](ctx, js, events.BucketRuns)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	x := &formula.Executor{
		Runs:    runs,
		Hosts:   hosts,
		Records: records,
		Secrets: sec,
		Bus:     formula.NewBus(&events.Publisher{JS: js, NC: nc, Source: cfg.Instance, Log: log, Heal: heal.Heal}),
		Actor:   cfg.Instance,
		PerHost: cfg.PerHost,
		Log:     log,
	}
	// A cancelled (or cancelling) workflow's running nodes are killed here.
	sub, err := nc.Subscribe(events.AllWorkflowLifecycle, func(m *nats.Msg) {
		env, err := events.Parse(m.Data)
		if err != nil || env.Type.Family() != events.FamilyWorkflow {
			return
		}
		var w events.WorkflowEvent
		if events.DecodeData(env, &w) == nil && (w.Status == dag.WorkflowCancelled || w.Cancelling) {
			log.Info("workflow cancelled: killing its nodes here", "workflow_id", w.WorkflowID)
			x.CancelWorkflow(w.WorkflowID)
		}
	})
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	log.Info("executor started", "max_formulas", cfg.MaxFormulas, "secrets_dir", sec.Path(), "allow_local", cfg.Hosts.AllowLocal)
	return consume.Run(ctx, cons, x.Handle, consume.Options{Name: "executor", Concurrency: cfg.MaxFormulas, AckWait: events.WorkAckWait, Logger: log,
		Repair: heal.Consumer(events.StreamDispatch, events.ConsumerExecutor)})
}
