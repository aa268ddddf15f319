package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

func newListCmd() *cobra.Command {
	var cf connFlags
	var limit int
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workflows, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return showState(cmd, &cf, output, func(ctx context.Context, cl *client.Client) ([]events.WorkflowSummary, error) {
				return cl.List(ctx, limit)
			}, printList)
		},
	}
	cf.add(cmd)
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many")
	outputFlag(cmd, &output, "table", "json")
	return cmd
}

// printList prints the workflows as a table, a row each.
func printList(w io.Writer, rows []events.WorkflowSummary) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW_ID\tNAME\tOPERATION\tSTATUS\tFORMULAS\tNODES\tCREATED")
	for _, r := range rows {
		row(tw, r.WorkflowID, r.Workflow, string(r.Operation), string(r.Status), strconv.Itoa(r.Formulas), strconv.Itoa(r.Nodes), r.CreatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}
