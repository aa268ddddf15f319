// Command state-store projects every gantry event into KV and answers the
// state.* requests. Configuration: flags, or the environment variables
// named in their help.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/services/state-store/service"
	"github.com/nats-io/nats.go"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var url string
	flag.StringVar(&url, "server", os.Getenv("NATS_URL"), "NATS URL ($NATS_URL)")
	flag.IntVar(&cfg.Replicas, "replicas", 1, "JetStream replicas for streams this service creates")
	flag.Parse()
	host, _ := os.Hostname()
	cfg.Instance = fmt.Sprintf("state-store/%s-%d", host, os.Getpid())
	cfg.Log = log
	os.Exit(natsconn.Main("state-store", url, log, func(ctx context.Context, nc *nats.Conn) error {
		return service.Run(ctx, nc, cfg)
	}))
}
