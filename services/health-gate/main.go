// Command health-gate runs health-gate checks over SSH (or
// locally). Configuration: flags, or the environment variables named in
// their help.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/services/health-gate/service"
	"github.com/nats-io/nats.go"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var url string
	flag.StringVar(&url, "server", os.Getenv("NATS_URL"), "NATS URL ($NATS_URL)")
	cfg.SSH.RegisterFlags(flag.CommandLine)
	flag.IntVar(&cfg.Concurrency, "concurrency", 32, "gates checked at once")
	flag.IntVar(&cfg.Replicas, "replicas", 1, "JetStream replicas for streams this service creates")
	flag.Parse()
	host, _ := os.Hostname()
	cfg.Instance = fmt.Sprintf("health-gate/%s-%d", host, os.Getpid())
	cfg.Log = log
	os.Exit(natsconn.Main("health-gate", url, log, func(ctx context.Context, nc *nats.Conn) error {
		return service.Run(ctx, nc, cfg)
	}))
}
