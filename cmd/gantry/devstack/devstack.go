// Package devstack runs the planner, executor, health-gate and state-store
// in one process, each on its own NATS connection: what `gantry dev` runs,
// and what integration tests start against an embedded server.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/internal/servicemain"
	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/tracing"
	executor "github.com/gantry-dev/gantry/services/executor/service"
	healthgate "github.com/gantry-dev/gantry/services/health-gate/service"
	planner "github.com/gantry-dev/gantry/services/planner/service"
	statestore "github.com/gantry-dev/gantry/services/state-store/service"
	"github.com/nats-io/nats.go"
)

// Config of a dev stack.
type Config struct {
	// Conn is where to connect (URL, and the TLS CA and client certificate
	// if the server wants them); each service adds its own nkey and inbox.
	Conn natsconn.Options
	Keys *busauth.Keys // the services' identities
	Log  *slog.Logger
	// Tracer gives each service ("gantry-planner", "gantry-executor",
	// "gantry-health-gate") its span recorder; nil records none.
	Tracer func(service string) *tracing.Tracer
	// The services' own settings, as their flags set them (gantry dev
	// takes every one: servicemain.Merge). Run sets their Instance, Log
	// and Tracer; the planner's Names add to those of Keys.
	Planner    planner.Config
	Executor   executor.Config
	HealthGate healthgate.Config
	StateStore statestore.Config
}

// plannerConfig is the planner's settings as instance inst.
func (c Config) plannerConfig(inst string) planner.Config {
	p := c.Planner
	p.Instance, p.Log, p.Tracer = inst, c.Log, c.tracer("gantry-planner")
	names := c.Keys.Names()
	for k, v := range c.Planner.Names {
		names[k] = v
	}
	p.Names = names
	return p
}

// executorConfig is the executor's settings as instance inst.
func (c Config) executorConfig(inst string) executor.Config {
	x := c.Executor
	x.Instance, x.Log, x.Tracer = inst, c.Log, c.tracer("gantry-executor")
	return x
}

func (c Config) tracer(service string) *tracing.Tracer {
	if c.Tracer == nil {
		return nil
	}
	return c.Tracer(service)
}

// EnvTracers are the services' tracers when OTEL_EXPORTER_OTLP_ENDPOINT is
// set in the environment getenv reads (one provider per service, so each
// has its service.name), and flush, to call on the way out; with it
// unset, none.
func EnvTracers(ctx context.Context, getenv func(string) string) (func(service string) *tracing.Tracer, func(), error) {
	if !tracing.Configured(getenv) {
		return nil, func() {}, nil
	}
	tracers := map[string]*tracing.Tracer{}
	var shutdowns []func(context.Context) error
	for _, s := range []string{"gantry-planner", "gantry-executor", "gantry-health-gate"} {
		t, shutdown, err := tracing.FromEnv(ctx, s, getenv)
		if err != nil {
			return nil, nil, err
		}
		tracers[s] = t
		shutdowns = append(shutdowns, shutdown)
	}
	flush := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range shutdowns {
			_ = s(ctx)
		}
	}
	return func(s string) *tracing.Tracer { return tracers[s] }, flush, nil
}

// ExecutorOptions are those of an extra executor (RunExecutor).
type ExecutorOptions struct {
	Name   string            // tells its instance apart: "executor/<host>-dev-<pid>-<name>"
	Labels map[string]string // --labels (zone)
}

// RunExecutor runs one more executor on its own connection, as the
// executor identity, until ctx ends: a second replica, or the executor of
// a zone.
func RunExecutor(ctx context.Context, cfg Config, o ExecutorOptions) error {
	host, _ := os.Hostname()
	id := events.Executor
	c := cfg.Conn
	c.Creds, c.NKey = cfg.Keys.Credentials(id)
	c.InboxPrefix = id.InboxPrefix()
	nc, err := natsconn.Connect(c, "gantry-dev-executor-"+o.Name, cfg.Log, true)
	if err != nil {
		return err
	}
	defer func() { _ = nc.Drain() }()
	x := cfg.executorConfig(fmt.Sprintf("executor/%s-dev-%d-%s", host, os.Getpid(), o.Name))
	x.Labels = o.Labels
	return servicemain.StopAsked(ctx, executor.Run(ctx, nc, x))
}

// RunPlanner runs one more planner on its own connection, as the planner
// identity, until ctx ends: a second replica (tests of replicas).
func RunPlanner(ctx context.Context, cfg Config, name string) error {
	host, _ := os.Hostname()
	id := events.Planner
	c := cfg.Conn
	c.Creds, c.NKey = cfg.Keys.Credentials(id)
	c.InboxPrefix = id.InboxPrefix()
	nc, err := natsconn.Connect(c, "gantry-dev-planner-"+name, cfg.Log, true)
	if err != nil {
		return err
	}
	defer func() { _ = nc.Drain() }()
	p := cfg.plannerConfig(fmt.Sprintf("planner/%s-dev-%d-%s", host, os.Getpid(), name))
	p.Tracer, p.Retention = nil, planner.Retention{} // the first planner records spans and prunes
	return servicemain.StopAsked(ctx, planner.Run(ctx, nc, p))
}

// Run runs the four services, each on its own connection as its own
// identity, until ctx ends or one fails.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Log
	host, _ := os.Hostname()
	inst := func(svc string) string { return fmt.Sprintf("%s/%s-dev-%d", svc, host, os.Getpid()) }
	type svc struct {
		name string
		run  func(context.Context, *nats.Conn) error
	}
	svcs := []svc{
		{"state-store", func(ctx context.Context, nc *nats.Conn) error {
			s := cfg.StateStore
			s.Instance, s.Log = inst("state-store"), log
			return statestore.Run(ctx, nc, s)
		}},
		{"planner", func(ctx context.Context, nc *nats.Conn) error {
			return planner.Run(ctx, nc, cfg.plannerConfig(inst("planner")))
		}},
		{"executor", func(ctx context.Context, nc *nats.Conn) error {
			return executor.Run(ctx, nc, cfg.executorConfig(inst("executor")))
		}},
		{"health-gate", func(ctx context.Context, nc *nats.Conn) error {
			g := cfg.HealthGate
			g.Instance, g.Log, g.Tracer = inst("health-gate"), log, cfg.tracer("gantry-health-gate")
			return healthgate.Run(ctx, nc, g)
		}},
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(svcs))
	for _, s := range svcs {
		id := events.Identity(s.name)
		o := cfg.Conn
		o.Creds, o.NKey = cfg.Keys.Credentials(id)
		o.InboxPrefix = id.InboxPrefix()
		nc, err := natsconn.Connect(o, "gantry-dev-"+s.name, log, true)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = nc.Drain() }()
			if err := servicemain.StopAsked(ctx, s.run(ctx, nc)); err != nil {
				errs <- fmt.Errorf("%s: %w", s.name, err)
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		return errors.Join(all...)
	}
	return nil
}
