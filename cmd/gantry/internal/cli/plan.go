package cli

import (
	"fmt"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/render"
	"github.com/spf13/cobra"
)

func newPlanCmd() *cobra.Command {
	var format string
	var vf *varFlags
	cmd := &cobra.Command{
		Use:   "plan FILE",
		Short: "Show what a composition will run, in what order",
		Long: `plan prints the levels of formulas, the node order inside each formula,
the health gates, and what targets selected. --format dot renders the DAG
for graphviz (gantry plan f.yaml --format dot | dot -Tsvg > plan.svg) and
--format mermaid for Markdown. --var and --var-file set vars over the
composition's and its hosts', as on submit.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, ok := render.Renderers[format]
			if !ok {
				return &exitError{code: ExitUsage, err: fmt.Errorf("unknown --format %q: use text, json, dot or mermaid", format)}
			}
			if _, err := vf.values(); err != nil {
				return err
			}
			plan, err := loadPlan(cmd.ErrOrStderr(), args[0], vf)
			if err != nil {
				printProblems(cmd.ErrOrStderr(), args[0], err)
				return failed("")
			}
			return r(cmd.OutOrStdout(), plan)
		},
	}
	cmd.Flags().StringVarP(&format, "format", "f", "text", "output format: text, json, dot or mermaid")
	vf = addVarFlags(cmd)
	return cmd
}
