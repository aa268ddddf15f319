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
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/services/state-store/service"
	"github.com/nats-io/nats.go"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var nf natsconn.ServiceFlags
	nf.Register(flag.CommandLine)
	flag.Parse()
	cfg.Replicas, cfg.Instance = nf.Replicas, natsconn.Instance("state-store")
	cfg.Log = log
	nf.InboxPrefix = events.StateStore.InboxPrefix()
	os.Exit(natsconn.Main("state-store", nf.Options, log, func(ctx context.Context, nc *nats.Conn) error {
		return service.Run(ctx, nc, cfg)
	}))
}
