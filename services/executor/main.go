// Command executor runs dispatched formulas on their hosts over SSH (or
// locally). Configuration: flags, or the environment variables named in
// their help.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostfile"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/secrets"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/gantry-dev/gantry/services/executor/service"
	"github.com/nats-io/nats.go"
)

const doc = `executor runs the formulas the planner dispatches on their hosts, over SSH (or
locally with --allow-local), and publishes every node transition and output
line. It is the NATS micro service gantry-executor (status on status.executor).`

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var nf natsconn.ServiceFlags
	nf.Register(flag.CommandLine)
	cfg.Hosts.RegisterFlags(flag.CommandLine)
	secrets.RegisterFlag(flag.CommandLine, &cfg.SecretsDir)
	hostfile.RegisterFlag(flag.CommandLine, &cfg.FilesDir)
	flag.IntVar(&cfg.MaxFormulas, "max-formulas", 64, "formulas running at once")
	flag.IntVar(&cfg.PerHost, "per-host", 8, "nodes running at once per host without max_parallel, across all executors")
	labels := flag.String("labels", "", "zone=ZONE: take only the work of hosts labelled with that zone ($GANTRY_EXECUTOR_LABELS; default none: only hosts without a zone)")
	var metrics string
	metricsserve.RegisterFlag(flag.CommandLine, &metrics)
	if err := natsconn.ParseService(flag.CommandLine, os.Args[1:], "executor", doc, map[string]string{"labels": "GANTRY_EXECUTOR_LABELS", "metrics": metricsserve.Env}); err != nil {
		log.Error("bad flag", "err", err)
		os.Exit(2)
	}
	err := service.CheckCounts(cfg.MaxFormulas, cfg.PerHost)
	if err == nil {
		cfg.Labels, err = service.ParseLabels(*labels)
	}
	if err != nil {
		log.Error("bad flag", "err", err)
		os.Exit(2)
	}
	cfg.Replicas, cfg.Instance = nf.Replicas, natsconn.Instance("executor")
	cfg.Log = log
	nf.InboxPrefix = events.Executor.InboxPrefix()
	var flush func()
	cfg.Tracer, flush = tracing.ForService("gantry-executor", log)
	code := natsconn.Main("executor", nf.Options, log, func(ctx context.Context, nc *nats.Conn) error {
		if _, err := metricsserve.Start(ctx, metrics, log); err != nil {
			return err
		}
		return service.Run(ctx, nc, cfg)
	})
	flush()
	os.Exit(code)
}
