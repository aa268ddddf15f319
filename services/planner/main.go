// Command planner validates, plans and accepts compositions and steps each
// run on its events. Configuration: flags, or the environment variables
// named in their help.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/gantry-dev/gantry/services/planner/service"
	"github.com/nats-io/nats.go"
)

const doc = `planner validates, plans and accepts compositions, steps each run on its
events and answers the control requests. It is the NATS micro service
gantry-planner (status on status.planner).`

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var cfg service.Config
	var nf natsconn.ServiceFlags
	nf.Register(flag.CommandLine)
	flag.DurationVar(&cfg.CancelWait, "cancel-wait", service.DefaultCancelWait, "how long a cancelled workflow waits for the outcomes of its running formulas before it ends cancelled without them (their executors kill what still runs when they next see their work)")
	flag.DurationVar(&cfg.UnclaimedAfter, "unclaimed-after", service.DefaultUnclaimedAfter, "how long a formula's dispatch may wait with no executor taking it before the planner reports it, naming the zone (no executor serves it, or its executors are busy)")
	var names string
	flag.StringVar(&names, "identity-names", "", "a JSON file of public nkeys and the names to show for them (gantry auth init writes DIR/names.json): who submitted or controlled a run shows by name when their credentials carry none (an nkey)")
	var metrics string
	metricsserve.RegisterFlag(flag.CommandLine, &metrics)
	cfg.Retention = service.Retention{Age: service.DefaultRetentionAge, Keep: service.DefaultRetentionKeep}
	service.RegisterRetentionFlags(flag.CommandLine, &cfg.Retention)
	if err := natsconn.ParseService(flag.CommandLine, os.Args[1:], "planner", doc, map[string]string{"metrics": metricsserve.Env}); err != nil {
		log.Error("bad flag", "err", err)
		os.Exit(2)
	}
	if cfg.CancelWait <= 0 {
		log.Error("bad flag", "err", fmt.Sprintf("--cancel-wait %s: a positive duration", cfg.CancelWait))
		os.Exit(2)
	}
	if cfg.UnclaimedAfter <= 0 {
		log.Error("bad flag", "err", fmt.Sprintf("--unclaimed-after %s: a positive duration", cfg.UnclaimedAfter))
		os.Exit(2)
	}
	if names != "" {
		n, err := busauth.ReadNames(names)
		if err != nil {
			log.Error("bad flag", "err", "--identity-names: "+err.Error())
			os.Exit(2)
		}
		cfg.Names = n
	}
	cfg.Replicas, cfg.Instance = nf.Replicas, natsconn.Instance("planner")
	cfg.Log = log
	nf.InboxPrefix = events.Planner.InboxPrefix()
	var flush func()
	cfg.Tracer, flush = tracing.ForService("gantry-planner", log)
	code := natsconn.Main("planner", nf.Options, log, func(ctx context.Context, nc *nats.Conn) error {
		if _, err := metricsserve.Start(ctx, metrics, log); err != nil {
			return err
		}
		return service.Run(ctx, nc, cfg)
	})
	flush()
	os.Exit(code)
}
