// Command executor runs dispatched formulas on their hosts over SSH (or
// locally). Configuration: flags, or the environment variables named in
// their help.
package main

import (
	"context"

	"github.com/gantry-dev/gantry/internal/servicemain"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/executor/service"
	"github.com/nats-io/nats.go"
)

const doc = `executor runs the formulas the planner dispatches on their hosts, over SSH (or
locally with --allow-local), and publishes every node transition and output
line. It is the NATS micro service gantry-executor (status on status.executor).`

func main() {
	var cfg service.Config
	servicemain.Main(servicemain.Service{Name: "executor", Doc: doc, Identity: events.Executor, Config: &cfg, Spans: true,
		Run: func(ctx context.Context, nc *nats.Conn, p servicemain.Process) error {
			cfg.Instance, cfg.Replicas, cfg.Log, cfg.Tracer = p.Instance, p.Replicas, p.Log, p.Tracer
			return service.Run(ctx, nc, cfg)
		}})
}
