package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// errNotReady is what ping reports while something it checks is missing.
var errNotReady = errors.New("not ready")

func newPingCmd() *cobra.Command {
	var cf connFlags
	var services []string
	var wait time.Duration
	var output string
	cmd := &cobra.Command{
		Use:   "ping",
		Short: "Check that NATS answers with JetStream enabled (and, with --service, that services answer)",
		Long: `ping connects to NATS, checks that JetStream is enabled, and with --service
checks that each named micro service (gantry-planner, gantry-state-store)
answers. It also asks every gantry service that runs whether JetStream
stores its writes, and names each stream or bucket one of them cannot store
on (a full disk, a storage limit). With --wait it keeps trying until
everything answers or the time is up. It exits 0 when ready and 3 when not:
a container health check or a script waiting for a stack to come up can use
it. It prints "ok", or with -o json (or yaml) {"ready", "error"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			deadline := time.Now().Add(wait)
			for {
				err := ping(cmd.Context(), &cf, services)
				if err == nil {
					return printPing(cmd.OutOrStdout(), output, nil)
				}
				if time.Now().Add(250 * time.Millisecond).After(deadline) {
					if err := printPing(cmd.OutOrStdout(), output, err); err != nil {
						return err
					}
					return &exitError{code: ExitProblem, err: err}
				}
				time.Sleep(250 * time.Millisecond)
			}
		},
	}
	cf.add(cmd)
	cmd.Flags().StringSliceVar(&services, "service", nil, "micro service that must answer (repeatable), e.g. gantry-planner")
	cmd.Flags().DurationVar(&wait, "wait", 0, "keep trying this long")
	outputFlag(cmd, &output, "text", formatJSON)
	return cmd
}

// pingResult is what gantry ping -o json prints.
type pingResult struct {
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
}

// printPing prints ping's verdict: "ok" (text, only when ready: the error
// goes to stderr), or the verdict as JSON or YAML.
func printPing(w io.Writer, format string, err error) error {
	switch {
	case structured(format) && err != nil:
		return printAs(w, format, pingResult{Error: err.Error()})
	case structured(format):
		return printAs(w, format, pingResult{Ready: true})
	case err == nil:
		fmt.Fprintln(w, "ok")
	}
	return nil
}

func ping(ctx context.Context, cf *connFlags, services []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	cl, err := cf.connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	var re *client.RequestError
	if err := cl.JetStream(ctx); errors.As(err, &re) {
		return fmt.Errorf("%w: JetStream at %s: %w", errNotReady, cl.Conn().ConnectedUrlRedacted(), re.Err)
	}
	for _, s := range services {
		if err := cl.Ping(ctx, s); err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return fmt.Errorf("%w: no %s service answers", errNotReady, s)
			}
			return fmt.Errorf("%w: %s: %w", errNotReady, s, err)
		}
	}
	problems, err := storageProblems(ctx, cl)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotReady, err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", errNotReady, strings.Join(problems, "; "))
	}
	return nil
}

// pingServices are the services whose storage ping asks about.
var pingServices = []events.Identity{events.Planner, events.Executor, events.HealthGate, events.StateStore}

// storageProblems asks every instance of the gantry services (their micro
// stats: the status endpoint's data) what they cannot store, and names
// each problem. Instances that do not answer within a moment are not
// waited for: ping checks --service for that.
func storageProblems(ctx context.Context, cl *client.Client) ([]string, error) {
	names := make([]string, len(pingServices))
	for i, id := range pingServices {
		names[i] = id.ServiceName()
	}
	stats, err := cl.Stats(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("ask the services: %w", err)
	}
	var problems []string
	for _, s := range stats {
		problems = append(problems, storageReport(s)...)
	}
	return problems, nil
}

// storageReport names the storage problems in one instance's micro stats.
func storageReport(stats []byte) []string {
	var s struct {
		Name      string `json:"name"`
		Endpoints []struct {
			Name string `json:"name"`
			Data struct {
				Instance string                `json:"instance"`
				Storage  *events.StorageStatus `json:"storage"`
			} `json:"data"`
		} `json:"endpoints"`
	}
	if json.Unmarshal(stats, &s) != nil {
		return nil
	}
	var out []string
	for _, e := range s.Endpoints {
		if e.Name != events.StatusEndpoint || e.Data.Storage == nil {
			continue
		}
		for _, p := range e.Data.Storage.Problems {
			out = append(out, fmt.Sprintf("%s (%s): JetStream cannot store on %s since %s (%d writes failed): %s",
				s.Name, e.Data.Instance, p.Stream, p.Since.Format(time.RFC3339), p.Failures, p.Cause))
		}
	}
	return out
}
