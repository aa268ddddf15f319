package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// errNotReady is what ping reports while something it checks is missing.
var errNotReady = errors.New("not ready")

func newPingCmd() *cobra.Command {
	var cf connFlags
	var services []string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "ping",
		Short: "Check that NATS answers with JetStream enabled (and, with --service, that services answer)",
		Long: `ping connects to NATS, checks that JetStream is enabled, and with --service
checks that each named micro service (gantry-planner, gantry-state-store)
answers. With --wait it keeps trying until everything answers or the time is
up. It exits 0 when ready and 3 when not: a container health check or a
script waiting for a stack to come up can use it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			deadline := time.Now().Add(wait)
			for {
				err := ping(cmd.Context(), &cf, services)
				if err == nil {
					fmt.Fprintln(cmd.OutOrStdout(), "ok")
					return nil
				}
				if time.Now().Add(250 * time.Millisecond).After(deadline) {
					return &exitError{code: ExitProblem, err: err}
				}
				time.Sleep(250 * time.Millisecond)
			}
		},
	}
	cf.add(cmd)
	cmd.Flags().StringSliceVar(&services, "service", nil, "micro service that must answer (repeatable), e.g. gantry-planner")
	cmd.Flags().DurationVar(&wait, "wait", 0, "keep trying this long")
	return cmd
}

func ping(ctx context.Context, cf *connFlags, services []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("%w: JetStream at %s: %w", errNotReady, nc.ConnectedUrlRedacted(), err)
	}
	for _, s := range services {
		if _, err := nc.RequestWithContext(ctx, "$SRV.PING."+s, nil); err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return fmt.Errorf("%w: no %s service answers", errNotReady, s)
			}
			return fmt.Errorf("%w: %s: %w", errNotReady, s, err)
		}
	}
	return nil
}
