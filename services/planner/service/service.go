// Package service wires the planner: the micro endpoints, the durable
// consumer of node, formula and health events, and resuming unfinished
// runs at start.
package service

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/gantry-dev/gantry/services/planner/internal/api"
	"github.com/gantry-dev/gantry/services/planner/internal/engine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultCancelWait is how long a cancelled workflow waits, at most, for
// the outcomes of its running formulas (--cancel-wait).
const DefaultCancelWait = engine.DefaultCancelWait

// DefaultUnclaimedAfter is how long a dispatch may wait for an executor
// before the planner says none has taken it (--unclaimed-after).
const DefaultUnclaimedAfter = engine.DefaultUnclaimedAfter

// Config of a planner.
type Config struct {
	Instance string
	Replicas int
	Log      *slog.Logger
	// Names names the public nkeys of known identities in audit records
	// whose credentials carry no name (nkeys, unlike user JWTs).
	Names     map[string]string
	namesFile string // --identity-names, read by Check
	// Tracer records its spans (nil: none).
	Tracer *tracing.Tracer
	// CancelWait bounds how long a cancelled workflow waits for the
	// outcomes of its running formulas before it ends cancelled without
	// them (DefaultCancelWait, 30 s, when 0).
	CancelWait time.Duration
	// UnclaimedAfter is how long a dispatch may wait with no executor
	// taking it before the planner reports it, naming the zone
	// (DefaultUnclaimedAfter, 30 s, when 0).
	UnclaimedAfter time.Duration
	// Retention is what the planner prunes on its own, every
	// RetentionInterval (off when both rules are 0).
	Retention Retention
}

// Retention is the retention setting (--retention-age, --retention-keep):
// finished workflows that ended more than Age ago and are not among the
// newest Keep finished runs of their composition are pruned, as gantry
// prune --older-than Age --keep Keep does. Age 0 drops the age rule and
// Keep 0 the count rule; with both 0, nothing is pruned.
type Retention struct {
	Age  time.Duration
	Keep int
}

// Default retention: a finished run's events stay as long as the event
// stream keeps them (30 days), and the last 10 runs of each composition
// whatever their age.
const (
	DefaultRetentionAge  = eventbus.EventsMaxAge
	DefaultRetentionKeep = 10
)

// RegisterRetentionFlags adds --retention-age and --retention-keep, set
// to r's values.
func RegisterRetentionFlags(fs *flag.FlagSet, r *Retention) {
	fs.Var((*ageFlag)(&r.Age), "retention-age", "prune finished workflows that ended longer ago than this (30d, 12h; 0: no age rule)")
	fs.IntVar(&r.Keep, "retention-keep", r.Keep, "but keep the newest N finished runs of each composition whatever their age (0: no such rule; both 0: retention off)")
}

// ageFlag is a duration flag that also takes days ("30d") and 0.
type ageFlag time.Duration

func (a *ageFlag) String() string {
	d := time.Duration(*a)
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	return d.String()
}

// Type names the value in a command's help.
func (a *ageFlag) Type() string { return "duration" }

func (a *ageFlag) Set(s string) error {
	if s == "0" {
		*a = 0
		return nil
	}
	d, err := events.ParseAge(s)
	if err != nil {
		return err
	}
	*a = ageFlag(d)
	return nil
}

// RetentionInterval is how often the planner applies the retention
// setting; RetentionFirst is how long after its start it does so first.
var (
	RetentionInterval = time.Hour
	RetentionFirst    = time.Minute
)

// Rule is the prune rule of the setting; ok is false when it is off.
func (r Retention) Rule() (engine.PruneRule, bool) {
	if r.Age <= 0 && r.Keep <= 0 {
		return engine.PruneRule{}, false
	}
	rule := engine.PruneRule{OlderThan: r.Age, Keep: r.Keep, HasKeep: r.Keep > 0, Reason: "retention"}
	rule.Reason += ": " + rule.String()
	return rule, true
}

// Run runs the planner until ctx is cancelled.
func Run(ctx context.Context, nc *nats.Conn, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	log := cfg.Log.With("service", "planner", "instance", cfg.Instance)
	js, err := eventbus.Open(ctx, nc, events.Planner, cfg.Replicas, log)
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	storage := consume.NewStorage(nc, log)
	js = eventbus.ObserveJS(js, storage)
	heal := &eventbus.Healer{JS: js, ID: events.Planner, Replicas: cfg.Replicas, Log: log}
	go heal.Watch(ctx)
	e, err := newEngine(ctx, js, &eventbus.Publisher{JS: js, NC: nc, Source: cfg.Instance, Log: log, Heal: heal.Heal})
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	e.Log, e.Names, e.Heal, e.Tracer, e.CancelWait, e.UnclaimedAfter = log, cfg.Names, heal.Heal, cfg.Tracer, cfg.CancelWait, cfg.UnclaimedAfter
	e.Zones = zones{js}
	failed, err := e.Resume(ctx)
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	go expireCancels(ctx, e, cfg.CancelWait)
	go keepTime(ctx, e, cfg.UnclaimedAfter)
	s := &starter{ctx: ctx, e: e, heal: heal, log: log}
	for _, id := range failed {
		s.background(id)
	}
	svc, err := api.Register(nc, eventbus.ServiceSpec{Version: buildinfo.Version(), Instance: cfg.Instance, Storage: storage}, e, log, s.start)
	if err != nil {
		return fmt.Errorf("planner: micro: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	cons, err := js.Consumer(ctx, events.StreamEvents, events.ConsumerPlanner)
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	go consume.WatchLag(ctx, js, events.StreamEvents, events.ConsumerPlanner, 0, log)
	if rule, on := cfg.Retention.Rule(); on {
		go retain(ctx, e, rule, log)
	}
	log.Info("planner started")
	return consume.RunBatch(ctx, cons, e.HandleBatch, consume.Options{Name: "planner", Prefetch: eventbus.PlannerPrefetch, AckWait: eventbus.EventAckWait, Logger: log,
		Skip: engine.Ignores, Repair: heal.Consumer(events.StreamEvents, events.ConsumerPlanner)})
}

// expireCancels ends the cancelled workflows whose running formulas have
// not reported within the wait (see engine.ExpireCancels), looking about
// ten times per wait, at least once a second.
func expireCancels(ctx context.Context, e *engine.Engine, wait time.Duration) {
	if wait <= 0 {
		wait = engine.DefaultCancelWait
	}
	t := time.NewTicker(min(time.Second, max(wait/10, 10*time.Millisecond)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.ExpireCancels(ctx)
		}
	}
}

// DeadlineTick is how often the planner looks for deadlines that have
// passed: a run stops at most this long after its deadline.
const DeadlineTick = 100 * time.Millisecond

// keepTime acts on the deadlines that have passed (every DeadlineTick)
// and looks for dispatches no executor has taken (about ten times per
// --unclaimed-after, at least once a second).
func keepTime(ctx context.Context, e *engine.Engine, unclaimedAfter time.Duration) {
	if unclaimedAfter <= 0 {
		unclaimedAfter = engine.DefaultUnclaimedAfter
	}
	deadlines := time.NewTicker(DeadlineTick)
	defer deadlines.Stop()
	unclaimed := time.NewTicker(min(time.Second, max(unclaimedAfter/10, DeadlineTick)))
	defer unclaimed.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadlines.C:
			e.ExpireDeadlines(ctx)
		case <-unclaimed.C:
			e.CheckUnclaimed(ctx)
		}
	}
}

// zones reads the dispatch consumers' state (engine.Zones).
type zones struct{ js jetstream.JetStream }

func (z zones) Takers(ctx context.Context, zone string) (events.Takers, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return eventbus.ZoneTakers(ctx, z.js, zone)
}

// newEngine is an engine on its JetStream adapters.
func newEngine(ctx context.Context, js jetstream.JetStream, pub *eventbus.Publisher) (*engine.Engine, error) {
	workflows, err := eventbus.NewBucket[engine.Record](ctx, js, events.BucketWorkflows)
	if err != nil {
		return nil, err
	}
	runs, err := eventbus.NewBucket[engine.Snapshot](ctx, js, events.BucketRuns)
	if err != nil {
		return nil, err
	}
	nodes, err := eventbus.NewBucket[events.NodeRecord](ctx, js, events.BucketNodes)
	if err != nil {
		return nil, err
	}
	// Another planner replica's writes, seen without a round trip.
	workflowRevs, err := eventbus.WatchRevisions(ctx, workflows.KV)
	if err != nil {
		return nil, err
	}
	runRevs, err := eventbus.WatchRevisions(ctx, runs.KV)
	if err != nil {
		return nil, err
	}
	return &engine.Engine{Workflows: workflows, Runs: runs, Nodes: nodes, Out: pub.Outbox(), Events: eventStore{js},
		WorkflowRevs: workflowRevs, RunRevs: runRevs}, nil
}

// eventStore is GANTRY_EVENTS for a prune.
type eventStore struct{ js jetstream.JetStream }

func (s eventStore) RemoveWorkflows(ctx context.Context, ids map[string]bool, spans []events.Span, dryRun bool) (events.StoreSize, error) {
	return eventbus.RemoveWorkflowMessages(ctx, s.js, events.StreamEvents, ids, spans, dryRun)
}

// retain applies the retention setting every RetentionInterval. Planner
// replicas may prune at once: each workflow is claimed with a
// compare-and-set, so one of them removes it.
func retain(ctx context.Context, e *engine.Engine, rule engine.PruneRule, log *slog.Logger) {
	wait := RetentionFirst
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = RetentionInterval
		reply, err := e.Prune(ctx, rule)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("retention: prune failed; trying again later", "err", err, "in", wait.String())
		case err == nil && len(reply.Errors) > 0:
			log.Warn("retention: some workflows not pruned; trying again later", "errors", reply.Errors)
		}
	}
}

// starter starts accepted runs, and carries on workflows a failed control
// request may have left part done (a retry's record written, its dispatch
// not). A start that fails (a stream it needs deleted, NATS away) is tried
// again, with a growing delay, until it goes through or the planner stops:
// an accepted workflow never sits with nothing to run.
type starter struct {
	ctx  context.Context
	e    *engine.Engine
	heal *eventbus.Healer
	log  *slog.Logger

	mu       sync.Mutex
	retrying map[string]bool // the workflows tried again in the background
}

// start tries once in the caller, then keeps trying in the background
// (once per workflow, however often it is handed over).
func (s *starter) start(id string) {
	if err := s.try(id); err != nil {
		s.log.Warn("start failed; trying again", "workflow_id", id, "err", err)
		s.background(id)
	}
}

// background keeps trying to start id in the background, unless that is
// under way already.
func (s *starter) background(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retrying[id] {
		return
	}
	if s.retrying == nil {
		s.retrying = map[string]bool{}
	}
	s.retrying[id] = true
	go s.retry(id)
}

func (s *starter) try(id string) error {
	err := s.e.Start(context.WithoutCancel(s.ctx), id)
	if eventbus.IsMissing(err) {
		if herr := s.heal.Heal(s.ctx); herr != nil {
			s.log.Error("cannot re-create what the run needs yet", "workflow_id", id, "err", herr)
		}
	}
	return err
}

func (s *starter) retry(id string) {
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.retrying, id)
	}()
	delay := 250 * time.Millisecond
	for try := 2; ; try++ {
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(delay):
		}
		err := s.try(id)
		if err == nil {
			s.log.Info("workflow started", "workflow_id", id, "tries", try)
			return
		}
		if try%10 == 0 {
			s.log.Warn("start still failing; trying again", "workflow_id", id, "tries", try, "err", err)
		}
		delay = min(2*delay, 10*time.Second)
	}
}
