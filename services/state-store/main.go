// Command state-store projects every gantry event into KV and answers the
// state.* requests. Configuration: flags, or the environment variables
// named in their help.
package main

import (
	"context"

	"github.com/gantry-dev/gantry/internal/servicemain"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/service"
	"github.com/nats-io/nats.go"
)

const doc = `state-store projects every gantry event into KV and answers the state.*
requests. It is the NATS micro service gantry-state-store (status on
status.state-store: how far the projection is behind the event stream).`

func main() {
	var cfg service.Config
	servicemain.Main(servicemain.Service{Name: "state-store", Doc: doc, Identity: events.StateStore, Config: &cfg,
		Run: func(ctx context.Context, nc *nats.Conn, p servicemain.Process) error {
			cfg.Instance, cfg.Replicas, cfg.Log = p.Instance, p.Replicas, p.Log
			return service.Run(ctx, nc, cfg)
		}})
}
