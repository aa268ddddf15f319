// Command health-gate runs health-gate checks over SSH (or
// locally). Configuration: flags, or the environment variables named in
// their help.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/secrets"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/gantry-dev/gantry/services/health-gate/service"
	"github.com/nats-io/nats.go"
)

const doc = `health-gate runs the health-gate checks of formulas on their hosts, over SSH
(or locally with --allow-local), and publishes each check and the verdict. It
is the NATS micro service gantry-health-gate (status on status.health-gate).`

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var nf natsconn.ServiceFlags
	nf.Register(flag.CommandLine)
	cfg.Hosts.RegisterFlags(flag.CommandLine)
	secrets.RegisterFlag(flag.CommandLine, &cfg.SecretsDir)
	flag.IntVar(&cfg.Concurrency, "concurrency", 32, "gates checked at once")
	var metrics string
	metricsserve.RegisterFlag(flag.CommandLine, &metrics)
	if err := natsconn.ParseService(flag.CommandLine, os.Args[1:], "health-gate", doc, map[string]string{"metrics": metricsserve.Env}); err != nil {
		log.Error("bad flag", "err", err)
		os.Exit(2)
	}
	cfg.Replicas, cfg.Instance = nf.Replicas, natsconn.Instance("health-gate")
	cfg.Log = log
	nf.InboxPrefix = events.HealthGate.InboxPrefix()
	var flush func()
	cfg.Tracer, flush = tracing.ForService("gantry-health-gate", log)
	code := natsconn.Main("health-gate", nf.Options, log, func(ctx context.Context, nc *nats.Conn) error {
		if _, err := metricsserve.Start(ctx, metrics, log); err != nil {
			return err
		}
		return service.Run(ctx, nc, cfg)
	})
	flush()
	os.Exit(code)
}
