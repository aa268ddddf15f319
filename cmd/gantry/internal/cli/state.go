package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

func newStateCmd() *cobra.Command {
	var cf connFlags
	var host, output string
	var rebuild, check bool
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Show what each host has: every composition's nodes, their last state and what is in place",
		Long: `state prints the per-host projection: a row per node of a composition on a
host. STATUS, OPERATION, SPEC, ENDED and WORKFLOW_ID are of the node's last
transition in a create or delete, whatever it was (a node blocked or cancelled
shows so). IN_PLACE says whether a create of the composition completed the node
and nothing has run it since ("yes, spec ..." when that create had another
spec than the one shown). CHECK is what the last operation: check run found
(ok or would_change; its state when it could not tell); a check changes
nothing else.

--rebuild replays the event stream and rewrites the projection where it
differs; --rebuild --check only compares. Both also check the stream itself
and list each problem with its workflow, node and stream sequences: an event
stored more than once (duplicate), a transition stored after one it comes
before in the same run, such as a node's running after its succeeded
(out_of_order; the projection applies neither), and a node the stream leaves
in another state than its executor recorded in gantry_nodes
(contradicts_record). It exits 1 when the projection differs (--check) or the
stream has a problem. --timeout bounds the whole call (default 5m for a
rebuild): past it, it exits 3 saying so, and the state-store gives up too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if rebuild || check {
				timeout := 5 * time.Minute
				if cmd.Flags().Changed("timeout") {
					timeout = cf.timeout
				}
				return rebuildState(cmd, cf, rebuildAsk{checkOnly: check, deadline: time.Now().Add(timeout), timeout: timeout, output: output})
			}
			if p := dag.HostNameProblem(host); host != "" && p != "" {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--host: host name %s", p)}
			}
			return showState(cmd, &cf, output, func(ctx context.Context, cl *client.Client) ([]events.HostNode, error) {
				return cl.Host(ctx, host)
			}, printHostNodes)
		},
	}
	cf.add(cmd)
	cmd.Flags().StringVar(&host, "host", "", "only this host, by its name (10.0.0.5, web-1.example.com)")
	_ = cmd.RegisterFlagCompletionFunc("host", cf.completeKnownHosts)
	outputFlag(cmd, &output, "table", "json")
	cmd.Flags().BoolVar(&rebuild, "rebuild", false, "rebuild the projection from the event stream, replacing what differs")
	cmd.Flags().BoolVar(&check, "check", false, "with --rebuild: only compare the projection with a rebuild (exit 1 if they differ)")
	return cmd
}

// printHostNodes prints the per-host projection as a table, a row per
// node of a composition on a host: its last transition in a create or
// delete (status, operation, spec, end, workflow id), whether a create's
// work is in place, and the last check's finding.
func printHostNodes(w io.Writer, nodes []events.HostNode) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tCOMPOSITION\tFORMULA\tNODE\tSTATUS\tOPERATION\tSPEC\tENDED\tIN_PLACE\tCHECK\tWORKFLOW_ID")
	for _, n := range nodes {
		ended := "-"
		if n.EndedAt != nil {
			ended = n.EndedAt.Local().Format(time.DateTime)
		}
		row(tw, n.Host, orDash(n.Workflow), n.Formula, n.Node, string(n.Status), orDash(string(n.Operation)),
			orDash(shortSpec(n.SpecHash)), ended, inPlaceText(n), checkText(n.Check), orDash(n.WorkflowID))
	}
	return tw.Flush()
}

// inPlaceText says whether a create's work is in place: yes, with the spec
// it was done with when that is not the one shown.
func inPlaceText(n events.HostNode) string {
	switch {
	case n.InPlace == nil:
		return "no"
	case n.InPlace.SpecHash != n.SpecHash:
		return "yes, spec " + shortSpec(n.InPlace.SpecHash)
	}
	return "yes"
}

// checkText is the last check run's finding (ok, would_change), or its state
// when it gave none (running, failed, ...).
func checkText(c *events.HostCheck) string {
	switch {
	case c == nil:
		return "-"
	case c.Result != "":
		return string(c.Result)
	}
	return string(c.Status)
}

func shortSpec(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}
