// Command state-store projects every gantry event into KV and answers the
// state.* requests. Configuration: flags, or the environment variables
// named in their help.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // served only when GANTRY_PPROF names an address
	"os"
	"os/signal"
	"syscall"

	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/services/state-store/service"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var url string
	flag.StringVar(&url, "server", os.Getenv("NATS_URL"), "NATS URL ($NATS_URL)")
	flag.IntVar(&cfg.Replicas, "replicas", 1, "JetStream replicas for streams this service creates")
	flag.Parse()
	if addr := os.Getenv("GANTRY_PPROF"); addr != "" {
		go func() { log.Warn("pprof", "err", http.ListenAndServe(addr, nil)) }()
	}
	host, _ := os.Hostname()
	cfg.Instance = fmt.Sprintf("state-store/%s-%d", host, os.Getpid())
	cfg.Log = log

	nc, err := natsconn.Connect(natsconn.URL(url), "gantry-state-store", log, true)
	if err != nil {
		log.Error("start", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := service.Run(ctx, nc, cfg); err != nil {
		log.Error("state-store stopped", "err", err)
		_ = nc.Drain()
		os.Exit(1)
	}
	_ = nc.Drain()
	log.Info("state-store stopped")
}
