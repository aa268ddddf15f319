// Package service wires the health-gate worker: it consumes decky.*.gate
// (one durable consumer shared by every replica) and runs each gate.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	"github.com/gantry-dev/gantry/pkg/secrets"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/gantry-dev/gantry/services/health-gate/internal/gate"
	"github.com/nats-io/nats.go"
)

// Config of a health-gate worker.
type Config struct {
	Instance    string
	Replicas    int
	Hosts       transport.HostsConfig // SSH, and whether transport local is allowed
	SecretsDir  string                // --secrets-dir: where the secrets commands name are read
	Concurrency int                   // gates checked at once (default 32)
	Log         *slog.Logger
	// Tracer records its spans (nil: none).
	Tracer *tracing.Tracer
}

// Run runs until ctx is cancelled, then finishes the gates in flight.
func Run(ctx context.Context, nc *nats.Conn, cfg Config) error {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	log := cfg.Log.With("service", "health-gate", "instance", cfg.Instance)
	if cfg.Hosts.SSH.Logger == nil {
		cfg.Hosts.SSH.Logger = log
	}
	sec, err := secrets.Open(cfg.SecretsDir)
	if err != nil {
		return fmt.Errorf("%s: %w", "health-gate", err)
	}
	js, err := eventbus.Open(ctx, nc, events.HealthGate, cfg.Replicas, log)
	if err != nil {
		return fmt.Errorf("health-gate: %w", err)
	}
	storage := consume.NewStorage(nc, log)
	js = eventbus.ObserveJS(js, storage)
	cons, err := js.Consumer(ctx, events.StreamGates, events.ConsumerHealthGate)
	if err != nil {
		return fmt.Errorf("health-gate: %w", err)
	}
	hosts := transport.NewHosts(cfg.Hosts)
	defer hosts.Close()
	heal := &eventbus.Healer{JS: js, ID: events.HealthGate, Replicas: cfg.Replicas, Log: log}
	go heal.Watch(ctx)
	outs, err := eventbus.NewBucket[events.OutputRecord](ctx, js, events.BucketOutputs)
	if err != nil {
		return fmt.Errorf("health-gate: %w", err)
	}
	c := &gate.Checker{Hosts: gateHosts{hosts}, Secrets: sec, Outputs: outs, Pub: &eventbus.Publisher{JS: js, NC: nc, Source: cfg.Instance, Log: log, Heal: heal.Heal}, Log: log, Tracer: cfg.Tracer}
	// A cancelled workflow's gates stop being checked here.
	sub, err := nc.Subscribe(events.AllWorkflowLifecycle, func(m *nats.Msg) { cancelGates(c, m, log) })
	if err != nil {
		return fmt.Errorf("health-gate: follow the workflows: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	svc, err := eventbus.AddService(nc, eventbus.ServiceSpec{ID: events.HealthGate, Version: buildinfo.Version(), Instance: cfg.Instance,
		Description: "gantry health-gate: checks formulas' health gates on their hosts", Status: func() any {
			gates, n := c.Status()
			return events.HealthGateStatus{Instance: cfg.Instance, GatesInProgress: n, Gates: gates, Storage: storage.Status()}
		}, Storage: storage})
	if err != nil {
		return fmt.Errorf("health-gate: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	go consume.WatchLag(ctx, js, events.StreamGates, events.ConsumerHealthGate, 0, log)
	log.Info("health-gate started", "secrets_dir", sec.Path(), "allow_local", cfg.Hosts.AllowLocal)
	return consume.Run(ctx, cons, c.Handle, consume.Options{Name: "health-gate", Concurrency: cfg.Concurrency, AckWait: eventbus.WorkAckWait, Logger: log,
		Repair: heal.Consumer(events.StreamGates, events.ConsumerHealthGate)})
}

// cancelGates stops the gates of a workflow a lifecycle event says is
// cancelled (or cancelling).
func cancelGates(c *gate.Checker, m *nats.Msg, log *slog.Logger) {
	w, err := events.WorkflowEventOn(m.Subject, m.Data)
	if err != nil {
		log.Warn("event refused: not from where its type comes", "security", true, "subject", m.Subject, "err", err)
	}
	if w == nil {
		return
	}
	if w.Status == dag.WorkflowCancelled || w.Cancelling {
		log.Info("workflow cancelled: its gates stop", "workflow_id", w.WorkflowID)
		c.WorkflowCancelled(w.WorkflowID, w.Generation, time.Now())
	}
}

// gateHosts gives the gate the runners of hosts: its checks are plain
// commands, nothing durable.
type gateHosts struct{ hosts *transport.Hosts }

func (h gateHosts) Runner(t transport.Target) (hostexec.Runner, error) { return h.hosts.Runner(t) }
