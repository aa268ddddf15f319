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
	flag.StringVar(&cfg.SSH.KeyFile, "ssh-key", os.Getenv("GANTRY_SSH_KEY"), "SSH private key ($GANTRY_SSH_KEY; default ~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
	flag.StringVar(&cfg.SSH.KnownHosts, "known-hosts", os.Getenv("GANTRY_KNOWN_HOSTS"), "known_hosts file ($GANTRY_KNOWN_HOSTS; default ~/.ssh/known_hosts)")
	flag.BoolVar(&cfg.SSH.InsecureIgnoreHostKey, "insecure-ignore-host-key", false, "connect to hosts whose key is unknown or changed (unsafe)")
	flag.BoolVar(&cfg.SSH.UseAgent, "ssh-agent", true, "also use the keys of the ssh-agent at $SSH_AUTH_SOCK")
	flag.IntVar(&cfg.SSH.MaxSessions, "ssh-max-sessions", 8, "SSH sessions at once per host connection (sshd's MaxSessions is 10 by default)")
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
