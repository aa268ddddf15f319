// Package devstacktest runs the four services against a test's NATS
// server, as gantry dev runs them: for tests only (no binary links it).
package devstacktest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/devstack"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	executor "github.com/gantry-dev/gantry/services/executor/service"
	healthgate "github.com/gantry-dev/gantry/services/health-gate/service"
)

// Start runs the services against ns (local transport allowed, no SSH
// key) until the test ends; the test waits for what it needs to answer.
func Start(t *testing.T, ns *natstest.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := Config(ns)
	go func() { done <- devstack.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the dev stack did not stop within 30s")
		}
	})
}

// Config is the dev stack's configuration against ns: local transport
// allowed, no SSH key, logs discarded.
func Config(ns *natstest.Server) devstack.Config {
	hosts := transport.HostsConfig{AllowLocal: true, SSH: sshexec.SSHConfig{KeyFile: "/nonexistent"}, Worker: localexec.WorkerEnvOf(os.LookupEnv)}
	return devstack.Config{Conn: natsconn.Options{URL: ns.URL()}, Keys: ns.Keys, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Executor: executor.Config{Hosts: hosts}, HealthGate: healthgate.Config{Hosts: hosts}}
}
