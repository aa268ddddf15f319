// Command state-store projects every gantry event into KV and answers the
// state.* requests. Configuration: flags, or the environment variables
// named in their help.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/services/state-store/service"
	"github.com/nats-io/nats.go"
)

const doc = `state-store projects every gantry event into KV and answers the state.*
requests. It is the NATS micro service gantry-state-store (status on
status.state-store: how far the projection is behind the event stream).`

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var nf natsconn.ServiceFlags
	nf.Register(flag.CommandLine)
	var metrics string
	metricsserve.RegisterFlag(flag.CommandLine, &metrics)
	if err := natsconn.ParseService(flag.CommandLine, os.Args[1:], "state-store", doc, map[string]string{"metrics": metricsserve.Env}); err != nil {
		log.Error("bad flag", "err", err)
		os.Exit(2)
	}
	cfg.Replicas, cfg.Instance = nf.Replicas, natsconn.Instance("state-store")
	cfg.Log = log
	nf.InboxPrefix = events.StateStore.InboxPrefix()
	os.Exit(natsconn.Main("state-store", nf.Options, log, func(ctx context.Context, nc *nats.Conn) error {
		if _, err := metricsserve.Start(ctx, metrics, log); err != nil {
			return err
		}
		return service.Run(ctx, nc, cfg)
	}))
}
