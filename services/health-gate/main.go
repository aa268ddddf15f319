// Command health-gate runs health-gate checks over SSH (or
// locally). Configuration: flags, or the environment variables named in
// their help.
package main

import (
	"context"

	"github.com/gantry-dev/gantry/internal/servicemain"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/health-gate/service"
	"github.com/nats-io/nats.go"
)

const doc = `health-gate runs the health-gate checks of formulas on their hosts, over SSH
(or locally with --allow-local), and publishes each check and the verdict. It
is the NATS micro service gantry-health-gate (status on status.health-gate).`

func main() {
	var cfg service.Config
	servicemain.Main(servicemain.Service{Name: "health-gate", Doc: doc, Identity: events.HealthGate, Config: &cfg, Spans: true,
		Run: func(ctx context.Context, nc *nats.Conn, p servicemain.Process) error {
			cfg.Instance, cfg.Replicas, cfg.Log, cfg.Tracer = p.Instance, p.Replicas, p.Log, p.Tracer
			return service.Run(ctx, nc, cfg)
		}})
}
