// Command planner validates, plans and accepts compositions and steps each
// run on its events. Configuration: flags, or the environment variables
// named in their help.
package main

import (
	"context"

	"github.com/gantry-dev/gantry/internal/servicemain"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/planner/service"
	"github.com/nats-io/nats.go"
)

const doc = `planner validates, plans and accepts compositions, steps each run on its
events and answers the control requests. It is the NATS micro service
gantry-planner (status on status.planner).`

func main() {
	var cfg service.Config
	servicemain.Main(servicemain.Service{Name: "planner", Doc: doc, Identity: events.Planner, Config: &cfg, Spans: true,
		Run: func(ctx context.Context, nc *nats.Conn, p servicemain.Process) error {
			cfg.Instance, cfg.Replicas, cfg.Log, cfg.Tracer = p.Instance, p.Replicas, p.Log, p.Tracer
			return service.Run(ctx, nc, cfg)
		}})
}
