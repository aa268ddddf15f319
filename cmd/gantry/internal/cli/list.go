package cli

import (
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

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
			cl, err := cf.connect()
			if err != nil {
				return err
			}
			defer cl.Close()
			rows, err := cl.List(cmd.Context(), limit)
			if err != nil {
				return stateErr(err)
			}
			if structured(output) {
				return printAs(cmd.OutOrStdout(), output, rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKFLOW_ID\tNAME\tOPERATION\tSTATUS\tFORMULAS\tNODES\tCREATED")
			for _, r := range rows {
				row(tw, r.WorkflowID, r.Workflow, string(r.Operation), string(r.Status), strconv.Itoa(r.Formulas), strconv.Itoa(r.Nodes), r.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cf.add(cmd)
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many")
	outputFlag(cmd, &output, "table", "json")
	return cmd
}
