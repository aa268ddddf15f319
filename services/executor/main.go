// Command executor runs dispatched formulas on their hosts over SSH (or
// locally). Configuration: flags, or the environment variables named in
// their help.
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
	"github.com/gantry-dev/gantry/services/executor/service"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var url string
	flag.StringVar(&url, "server", os.Getenv("NATS_URL"), "NATS URL ($NATS_URL)")
	flag.StringVar(&cfg.SSH.KeyFile, "ssh-key", os.Getenv("GANTRY_SSH_KEY"), "SSH private key ($GANTRY_SSH_KEY; default ~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
	flag.StringVar(&cfg.SSH.KnownHosts, "known-hosts", os.Getenv("GANTRY_KNOWN_HOSTS"), "known_hosts file ($GANTRY_KNOWN_HOSTS; default ~/.ssh/known_hosts)")
	flag.BoolVar(&cfg.SSH.InsecureIgnoreHostKey, "insecure-ignore-host-key", false, "connect to hosts whose key is unknown or changed (unsafe)")
	flag.BoolVar(&cfg.SSH.UseAgent, "ssh-agent", true, "also use the keys of the ssh-agent at $SSH_AUTH_SOCK")
	flag.IntVar(&cfg.SSH.MaxSessions, "ssh-max-sessions", 8, "SSH sessions at once per host connection (sshd's MaxSessions is 10 by default)")
	flag.IntVar(&cfg.MaxFormulas, "max-formulas", 64, "formulas running at once")
	flag.IntVar(&cfg.PerHost, "per-host", 8, "nodes running at once per host")
	flag.IntVar(&cfg.Replicas, "replicas", 1, "JetStream replicas for streams this service creates")
	flag.Parse()
	if addr := os.Getenv("GANTRY_PPROF"); addr != "" {
		go func() { log.Warn("pprof", "err", http.ListenAndServe(addr, nil)) }()
	}
	host, _ := os.Hostname()
	cfg.Instance = fmt.Sprintf("executor/%s-%d", host, os.Getpid())
	cfg.Log = log

	nc, err := natsconn.Connect(natsconn.URL(url), "gantry-executor", log, true)
	if err != nil {
		log.Error("start", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := service.Run(ctx, nc, cfg); err != nil {
		log.Error("executor stopped", "err", err)
		_ = nc.Drain()
		os.Exit(1)
	}
	_ = nc.Drain()
	log.Info("executor stopped")
}
