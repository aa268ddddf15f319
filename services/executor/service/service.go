// Package service wires the executor: it consumes formula-ready work from
// decky.*.dispatch.<zone> (one durable consumer per zone, shared by the
// replicas of that zone) and runs each formula on its host, taking slots
// of its limits in gantry_slots. main.go and `gantry dev` both start it.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	"github.com/gantry-dev/gantry/pkg/hostfile"
	"github.com/gantry-dev/gantry/pkg/secrets"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/gantry-dev/gantry/services/executor/internal/formula"
	"github.com/gantry-dev/gantry/services/executor/internal/prune"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config of an executor.
type Config struct {
	Instance    string                // "executor/<host>-<pid>": the actor named in events
	Replicas    int                   // stream replicas (1 for a single server)
	Hosts       transport.HostsConfig // SSH, and whether transport local is allowed
	SecretsDir  string                // --secrets-dir: where the secrets commands name are read
	FilesDir    string                // --files-dir: where the files nodes place as source are read
	MaxFormulas int                   // formulas running at once in this executor (default 64)
	PerHost     int                   // nodes running at once per host without max_parallel, across executors (default 8)
	// Labels (--labels zone=eu-1) say which work this executor takes: with
	// a zone, only the work of hosts labelled with that zone; without,
	// only the work of hosts without a zone.
	Labels map[string]string
	labels string // --labels as given, read by Check
	Log    *slog.Logger
	// Tracer records its spans (nil: none).
	Tracer *tracing.Tracer
}

// ParseLabels reads --labels (GANTRY_EXECUTOR_LABELS): "zone=eu-1", or
// empty. zone is the only label that routes work.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return nil, fmt.Errorf("--labels: %q is not key=value", kv)
		case k != dag.ZoneLabel:
			return nil, fmt.Errorf("--labels: unknown label %q: only %s routes work to an executor (--labels %s=eu-1)", k, dag.ZoneLabel, dag.ZoneLabel)
		case !dag.IsToken(v):
			return nil, fmt.Errorf("--labels: zone %q is not a name ([a-z0-9][a-z0-9_-]{0,62})", v)
		case out[k] != "" && out[k] != v:
			return nil, fmt.Errorf("--labels: zone given twice (%s, %s)", out[k], v)
		}
		out[k] = v
	}
	return out, nil
}

// CheckCounts names each of --max-formulas and --per-host that is not a
// count of at least 1.
func CheckCounts(maxFormulas, perHost int) error {
	var errs []error
	if maxFormulas < 1 {
		errs = append(errs, fmt.Errorf("--max-formulas %d: at least 1 formula at once", maxFormulas))
	}
	if perHost < 1 {
		errs = append(errs, fmt.Errorf("--per-host %d: at least 1 node at once on a host", perHost))
	}
	return errors.Join(errs...)
}

// status is the executor's status endpoint and micro stats.
func status(x *formula.Executor, cfg Config, zone string, storage *eventbus.Storage) func() any {
	return func() any {
		formulas, nodes, total := x.Status()
		held, nHeld := x.Held()
		return events.ExecutorStatus{Instance: cfg.Instance, Zone: zone, MaxFormulas: cfg.MaxFormulas,
			RunningFormulas: formulas, RunningNodes: total, Nodes: nodes, HeldFormulas: nHeld, Held: held, Storage: storage.Status()}
	}
}

// Run runs the executor until ctx is cancelled, then finishes the formulas
// in flight and returns: the commands that started run to their end, and
// nothing more starts (a node waiting for slots or an SSH session stops
// waiting, its dispatch given back for a redelivery).
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
	files, err := hostfile.OpenDir(cfg.FilesDir)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	js, err := eventbus.Open(ctx, nc, events.Executor, cfg.Replicas, log)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	storage := consume.NewStorage(nc, log)
	js = eventbus.ObserveJS(js, storage)
	heal := &eventbus.Healer{JS: js, ID: events.Executor, Replicas: cfg.Replicas, Log: log}
	go heal.Watch(ctx)
	records, err := eventbus.NewBucket[formula.Record](ctx, js, events.BucketNodes)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	zone := cfg.Labels[dag.ZoneLabel]
	ccfg := eventbus.ExecutorConsumer(zone)
	consumer := func(ctx context.Context) (jetstream.Consumer, error) {
		return js.CreateOrUpdateConsumer(ctx, events.StreamDispatch, ccfg)
	}
	cons, err := consumer(ctx)
	if err != nil {
		return fmt.Errorf("executor: consumer %s: %w", ccfg.Durable, err)
	}
	slotsKV, err := js.KeyValue(ctx, events.BucketSlots)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	hosts := transport.NewHosts(cfg.Hosts)
	defer hosts.Close()
	// Stopping: the commands that started run on to their end (the
	// formulas in flight drain), but nothing more starts; what waits for
	// an SSH session stops waiting at once.
	defer context.AfterFunc(ctx, hosts.Drain)()
	runs, err := eventbus.NewBucket[events.RunSnapshot](ctx, js, events.BucketRuns)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	outs, err := eventbus.NewBucket[events.OutputRecord](ctx, js, events.BucketOutputs)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	x := &formula.Executor{
		Runs:     runs,
		Hosts:    hosts,
		Records:  records,
		Outputs:  outs,
		Secrets:  sec,
		Sources:  files,
		Tracer:   cfg.Tracer,
		Bus:      formula.NewBus(&eventbus.Publisher{JS: js, NC: nc, Source: cfg.Instance, Log: log, Heal: heal.Heal}),
		Actor:    cfg.Instance,
		PerHost:  cfg.PerHost,
		Slots:    &slots.Manager{Store: slots.KV{KV: slotsKV, NC: nc}, Executor: cfg.Instance, PerHost: cfg.PerHost, Linger: slots.DefaultLinger, Log: log},
		Log:      log,
		Stopping: ctx,
	}
	defer x.Slots.GiveBackLingering()
	// A cancelled (or cancelling) workflow's running nodes are killed
	// here, and those of its formulas whose timeout passed; a resumed
	// workflow's formulas held by its pause go on.
	sub, err := nc.Subscribe(events.AllWorkflowLifecycle, func(m *nats.Msg) {
		w, err := events.WorkflowEventOn(m.Subject, m.Data)
		if err != nil {
			log.Warn("event refused: not from where its type comes", "security", true, "subject", m.Subject, "err", err)
		}
		if w == nil {
			return
		}
		if w.Status != dag.WorkflowPaused {
			x.Resumed(w.WorkflowID) // its formulas held by a pause read their run state again
		}
		if w.Status == dag.WorkflowCancelled || w.Cancelling {
			log.Info("workflow cancelled: killing its nodes here", "workflow_id", w.WorkflowID)
			switch {
			case w.RequestedBy != nil:
				x.Cancelled(w.WorkflowID, w.Generation, w.RequestedBy.Display())
			case strings.HasPrefix(w.Reason, events.ReasonDeadline+":"):
				x.DeadlinePassed(w.WorkflowID, w.Generation)
			default:
				x.Cancelled(w.WorkflowID, w.Generation, "")
			}
		}
		if len(w.Stopping) > 0 {
			log.Info("formulas past their timeout: killing their nodes here", "workflow_id", w.WorkflowID, "formulas", w.Stopping)
			x.StopFormulas(w.WorkflowID, w.Generation, w.Stopping)
		}
	})
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	stopPrune, err := startPrune(ctx, nc, js, records, runs, log)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	defer stopPrune()
	svc, err := eventbus.AddService(nc, eventbus.ServiceSpec{ID: events.Executor, Version: buildinfo.Version(), Instance: cfg.Instance,
		Description: "gantry executor: runs dispatched formulas on their hosts", Status: status(x, cfg, zone, storage), Storage: storage})
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	go consume.WatchLag(ctx, js, events.StreamDispatch, ccfg.Durable, 0, log)
	log.Info("executor started", "max_formulas", cfg.MaxFormulas, "per_host", cfg.PerHost, "zone", zone, "consumer", ccfg.Durable,
		"secrets_dir", sec.Path(), "files_dir", files.Path(), "allow_local", cfg.Hosts.AllowLocal)
	return consume.Run(ctx, cons, x.Handle, consume.Options{Name: "executor", Concurrency: cfg.MaxFormulas, AckWait: eventbus.WorkAckWait, Logger: log,
		Repair: func(ctx context.Context) (jetstream.Consumer, error) {
			if err := heal.Heal(ctx); err != nil {
				return nil, err
			}
			return consumer(ctx)
		}})
}

// ReconcileInterval is how often an executor looks for node records of
// workflows pruned while it did not hear of it (and once at its start).
var ReconcileInterval = time.Hour

// startPrune acts on the planner's pruned events: one executor of all
// (a queue group) removes each pruned workflow's node records and output
// lines. Announcements missed (the executor down, or disconnected) are
// caught by Reconcile, at start and every ReconcileInterval.
func startPrune(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, nodes eventbus.Bucket[formula.Record], runs eventbus.Bucket[events.RunSnapshot], log *slog.Logger) (func(), error) {
	rm := &prune.Remover{Nodes: nodes, Runs: runs, Logs: logStore{js}, Log: log}
	pruned := make(chan *events.WorkflowPruned, 4096)
	sub, err := nc.QueueSubscribe(events.AllWorkflowLifecycle, "executor-prune", func(m *nats.Msg) {
		env, err := events.Parse(m.Data)
		if err != nil || env.Type != events.TypeWorkflowPruned {
			return
		}
		if err := events.Admit(m.Subject, env); err != nil {
			log.Warn("event refused: not from where its type comes", "security", true, "subject", m.Subject, "type", string(env.Type), "err", err)
			return
		}
		var p events.WorkflowPruned
		if err := events.DecodeData(env, &p); err != nil {
			log.Warn("pruned event does not decode", "subject", m.Subject, "err", err)
			return
		}
		select {
		case pruned <- &p:
		default: // the reconcile finds its node records; its lines age out
			log.Warn("too many pruned workflows at once; the next reconcile removes this one's node records", "workflow_id", p.WorkflowID)
		}
	})
	if err != nil {
		return nil, err
	}
	go func() {
		tick := time.NewTicker(ReconcileInterval)
		defer tick.Stop()
		reconcile := func() {
			if _, err := rm.Reconcile(ctx); err != nil && ctx.Err() == nil {
				log.Error("cannot look for pruned workflows' node records", "err", err)
			}
		}
		reconcile()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				reconcile()
			case p := <-pruned:
				batch := []*events.WorkflowPruned{p}
				for more := true; more && len(batch) < 256; {
					select {
					case p := <-pruned:
						batch = append(batch, p)
					default:
						more = false
					}
				}
				if err := rm.Pruned(ctx, batch); err != nil && ctx.Err() == nil {
					log.Error("cannot remove pruned workflows' records and lines; the next reconcile tries the records again", "err", err)
				}
			}
		}
	}()
	return func() { _ = sub.Unsubscribe() }, nil
}

// logStore is GANTRY_LOGS for a prune.
type logStore struct{ js jetstream.JetStream }

func (s logStore) RemoveWorkflows(ctx context.Context, ids map[string]bool, spans []events.Span) (events.StoreSize, error) {
	return eventbus.RemoveWorkflowMessages(ctx, s.js, events.StreamLogs, ids, spans, false)
}
