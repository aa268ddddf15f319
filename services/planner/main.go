// Command planner validates, plans and accepts compositions and steps each
// run on its events. Configuration: flags, or the environment variables
// named in their help.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/gantry-dev/gantry/services/planner/service"
	"github.com/nats-io/nats.go"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var nf natsconn.ServiceFlags
	nf.Register(flag.CommandLine)
	flag.Parse()
	cfg.Replicas, cfg.Instance = nf.Replicas, natsconn.Instance("planner")
	cfg.Log = log
	nf.InboxPrefix = events.Planner.InboxPrefix()
	var flush func()
	cfg.Tracer, flush = tracing.ForService("gantry-planner", log)
	code := natsconn.Main("planner", nf.Options, log, func(ctx context.Context, nc *nats.Conn) error {
		return service.Run(ctx, nc, cfg)
	})
	flush()
	os.Exit(code)
}
