// Package servicemain is the main of every gantry service: it parses the
// service's flags, each also set by its environment variable (the help
// names it), logs JSON to stderr, serves pprof (--pprof) and the
// Prometheus metrics (--metrics), sets up span export (the standard
// OTEL_* variables), connects to NATS as the service (reconnecting
// forever), runs the service until SIGINT or SIGTERM, then drains the
// connection so work in flight is settled. Each services/*/main.go is a
// Service and a call to Main.
package servicemain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/nats-io/nats.go"
)

// Service is one gantry service.
type Service struct {
	// Name is the service's name ("executor"): its connection is
	// gantry-<Name>, its spans' service.name too, its instance
	// <Name>/<host>-<pid>.
	Name     string
	Doc      string          // what it does, the head of --help
	Identity events.Identity // the identity whose inbox prefix its replies use
	Config   Config          // its own flags, on top of Common's
	// Spans says the service records spans (a Process.Tracer when the
	// OTEL_* variables name an exporter); the state-store records none.
	Spans bool
	Run   func(ctx context.Context, nc *nats.Conn, p Process) error
}

// Process is what Main gives a service's Run.
type Process struct {
	Instance string // "<service>/<host>-<pid>": the actor named in events and logs
	Replicas int    // --replicas
	Log      *slog.Logger
	Tracer   *tracing.Tracer // nil: no spans recorded
}

// Common are the flags every service takes.
type Common struct {
	NATS     natsconn.Options // --server, credentials, TLS, --context, --nats-*
	Replicas int              // --replicas
	Metrics  string           // --metrics ADDR
	PProf    string           // --pprof ADDR
}

// PProfUsage is the help of --pprof.
const PProfUsage = "serve Go's pprof profiles at http://ADDR/debug/pprof/ (e.g. 127.0.0.1:6061; keep it on loopback: profiles show the process's internals) ($GANTRY_PPROF; default off)"

// RegisterFlags adds the flags every service takes to fs.
func (c *Common) RegisterFlags(fs *flag.FlagSet) {
	c.NATS.Register(fs)
	fs.IntVar(&c.Replicas, "replicas", 1, "JetStream replicas for streams this service creates")
	fs.StringVar(&c.Metrics, "metrics", "", metricsserve.Usage)
	fs.StringVar(&c.PProf, "pprof", "", PProfUsage)
}

// Main runs s with this process's arguments and environment, and exits
// with its code.
func Main(s Service) {
	os.Exit(Run(s, os.Args[1:], os.LookupEnv, os.Stderr))
}

// Run runs s with the command line args and the environment lookup,
// logging to stderr, and returns the exit code: 0 when it stopped on a
// signal, 1 when it failed, 2 for bad flags or settings.
func Run(s Service, args []string, lookup LookupEnv, stderr io.Writer) int {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	var c Common
	if err := parse(s, &c, args, lookup, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		log.Error("bad flag", "err", err)
		return 2
	}
	ServePProf(c.PProf, log)
	o, err := c.NATS.Resolved(func(n string) string { v, _ := lookup(n); return v })
	if err != nil {
		log.Error("start", "err", err)
		return 1
	}
	p := Process{Instance: Instance(s.Name), Replicas: c.Replicas, Log: log}
	flush := func() {}
	if s.Spans {
		if p.Tracer, flush, err = tracer("gantry-"+s.Name, func(n string) string { v, _ := lookup(n); return v }, log); err != nil {
			log.Error("bad trace export settings", "err", err)
			return 2
		}
	}
	defer flush()
	o.InboxPrefix = s.Identity.InboxPrefix()
	return serve(s, o, c.Metrics, p)
}

// parse parses the command line into c and s.Config and checks them.
func parse(s Service, c *Common, args []string, lookup LookupEnv, stderr io.Writer) error {
	fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.RegisterFlags(fs)
	s.Config.RegisterFlags(fs)
	if err := EnvOf(s.Config).Parse(fs, args, lookup, s.Name, s.Doc); err != nil {
		return err
	}
	ReadEnv(lookup, s.Config)
	return s.Config.Check()
}

// serve connects as the service, serves the metrics and runs it until
// SIGINT or SIGTERM.
func serve(s Service, o natsconn.Options, metrics string, p Process) int {
	nc, err := natsconn.Connect(o, "gantry-"+s.Name, p.Log, true)
	if err != nil {
		p.Log.Error("start", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = func() error {
		if _, err := metricsserve.Start(ctx, metrics, p.Log); err != nil {
			return err
		}
		return StopAsked(ctx, s.Run(ctx, nc, p))
	}()
	_ = nc.Drain()
	if err != nil {
		p.Log.Error(s.Name+" stopped", "err", err)
		return 1
	}
	p.Log.Info(s.Name + " stopped")
	return 0
}

// tracer is the service's span recorder (tracing.FromEnv) and flush,
// which sends what is pending within 5 seconds.
func tracer(service string, getenv tracing.Getenv, log *slog.Logger) (*tracing.Tracer, func(), error) {
	t, shutdown, err := tracing.FromEnv(context.Background(), service, getenv)
	if err != nil {
		return nil, nil, err
	}
	return t, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("spans not exported", "err", err)
		}
	}, nil
}

// Instance names this process in events and logs: "<service>/<host>-<pid>".
func Instance(service string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s-%d", service, host, os.Getpid())
}
