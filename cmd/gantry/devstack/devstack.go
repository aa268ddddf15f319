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

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
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
	SSH  hostexec.SSHConfig
	// AllowLocal lets the executor and health-gate run transport local
	// commands (as this process's user, on this machine).
	AllowLocal bool
	SecretsDir string // where the secrets commands name are read
	FilesDir   string // where the files nodes place as source are read (the executor's --files-dir)
	PerHost    int    // the executor's --per-host (default 8)
	// MaxFormulas is the executor's --max-formulas (default 64).
	MaxFormulas int
	// CancelWait is the planner's --cancel-wait: how long a cancelled
	// workflow waits for its running formulas' outcomes (default 30 s).
	CancelWait time.Duration
	// UnclaimedAfter is the planner's --unclaimed-after: how long a
	// dispatch may wait for an executor before the planner reports it
	// (default 30 s).
	UnclaimedAfter time.Duration
	Log            *slog.Logger
	// Tracer gives each service ("gantry-planner", "gantry-executor",
	// "gantry-health-gate") its span recorder; nil records none.
	Tracer func(service string) *tracing.Tracer
	// Retention is the planner's retention setting (zero: off).
	Retention planner.Retention
}

func (c Config) tracer(service string) *tracing.Tracer {
	if c.Tracer == nil {
		return nil
	}
	return c.Tracer(service)
}

// EnvTracers are the services' tracers when OTEL_EXPORTER_OTLP_ENDPOINT is
// set (one provider per service, so each has its service.name), and
// flush, to call on the way out; with it unset, none.
func EnvTracers(ctx context.Context) (func(service string) *tracing.Tracer, func(), error) {
	if !tracing.Configured() {
		return nil, func() {}, nil
	}
	tracers := map[string]*tracing.Tracer{}
	var shutdowns []func(context.Context) error
	for _, s := range []string{"gantry-planner", "gantry-executor", "gantry-health-gate"} {
		t, shutdown, err := tracing.FromEnv(ctx, s)
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
	return executor.Run(ctx, nc, executor.Config{Instance: fmt.Sprintf("executor/%s-dev-%d-%s", host, os.Getpid(), o.Name),
		Hosts: hostexec.HostsConfig{SSH: cfg.SSH, AllowLocal: cfg.AllowLocal}, SecretsDir: cfg.SecretsDir, FilesDir: cfg.FilesDir, PerHost: cfg.PerHost, MaxFormulas: cfg.MaxFormulas, Labels: o.Labels, Log: cfg.Log, Tracer: cfg.tracer("gantry-executor")})
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
	return planner.Run(ctx, nc, planner.Config{Instance: fmt.Sprintf("planner/%s-dev-%d-%s", host, os.Getpid(), name), Log: cfg.Log, Names: cfg.Keys.Names(), CancelWait: cfg.CancelWait, UnclaimedAfter: cfg.UnclaimedAfter})
}

// Run runs the four services, each on its own connection as its own
// identity, until ctx ends or one fails.
func Run(ctx context.Context, cfg Config) error {
	hosts, log := hostexec.HostsConfig{SSH: cfg.SSH, AllowLocal: cfg.AllowLocal}, cfg.Log
	host, _ := os.Hostname()
	inst := func(svc string) string { return fmt.Sprintf("%s/%s-dev-%d", svc, host, os.Getpid()) }
	type svc struct {
		name string
		run  func(context.Context, *nats.Conn) error
	}
	svcs := []svc{
		{"state-store", func(ctx context.Context, nc *nats.Conn) error {
			return statestore.Run(ctx, nc, statestore.Config{Instance: inst("state-store"), Log: log})
		}},
		{"planner", func(ctx context.Context, nc *nats.Conn) error {
			return planner.Run(ctx, nc, planner.Config{Instance: inst("planner"), Log: log, Names: cfg.Keys.Names(), Tracer: cfg.tracer("gantry-planner"), CancelWait: cfg.CancelWait, UnclaimedAfter: cfg.UnclaimedAfter, Retention: cfg.Retention})
		}},
		{"executor", func(ctx context.Context, nc *nats.Conn) error {
			return executor.Run(ctx, nc, executor.Config{Instance: inst("executor"), Hosts: hosts, SecretsDir: cfg.SecretsDir, FilesDir: cfg.FilesDir, PerHost: cfg.PerHost, MaxFormulas: cfg.MaxFormulas, Log: log, Tracer: cfg.tracer("gantry-executor")})
		}},
		{"health-gate", func(ctx context.Context, nc *nats.Conn) error {
			return healthgate.Run(ctx, nc, healthgate.Config{Instance: inst("health-gate"), Hosts: hosts, SecretsDir: cfg.SecretsDir, Log: log, Tracer: cfg.tracer("gantry-health-gate")})
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
			if err := s.run(ctx, nc); err != nil {
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
