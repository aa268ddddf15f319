package cli

import (
	"fmt"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/render"
	"github.com/spf13/cobra"
)

func newPlanCmd() *cobra.Command {
	var format, output string
	var vf *varFlags
	cmd := &cobra.Command{
		Use:   "plan FILE",
		Short: "Show what a composition will run, in what order",
		Long: `plan prints the levels of formulas, the node order inside each formula,
the health gates, and what targets selected. --format dot renders the DAG
for graphviz (gantry plan f.yaml --format dot | dot -Tsvg > plan.svg) and
--format mermaid for Markdown; -o json (or yaml) prints the plan as data,
as --format json does. --var and --var-file set vars over the
composition's and its hosts', as on submit. It exits 1 when the
composition is invalid, 3 when it cannot be read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := planFormat(cmd, format, output)
			if err != nil {
				return err
			}
			if _, err := vf.values(); err != nil {
				return err
			}
			plan, err := loadPlan(cmd.ErrOrStderr(), args[0], vf)
			if err != nil {
				printProblems(cmd.ErrOrStderr(), args[0], err)
				if unreadable(err) {
					return &exitError{code: ExitProblem, err: fmt.Errorf("%s could not be read", args[0])}
				}
				return failed("")
			}
			if format == formatYAML {
				return printAs(cmd.OutOrStdout(), formatYAML, plan)
			}
			return render.Renderers[format](cmd.OutOrStdout(), plan)
		},
	}
	cmd.Flags().StringVarP(&format, "format", "f", "text", "output format: text, json, dot or mermaid")
	outputFlag(cmd, &output, "text", formatJSON)
	vf = addVarFlags(cmd)
	return cmd
}

// planFormat is what plan prints: --format, or -o; both given, they must
// agree.
func planFormat(cmd *cobra.Command, format, output string) (string, error) {
	if _, ok := render.Renderers[format]; !ok {
		return "", &exitError{code: ExitUsage, err: fmt.Errorf("unknown --format %q: use text, json, dot or mermaid", format)}
	}
	switch {
	case !cmd.Flags().Changed("output"):
		return format, nil
	case cmd.Flags().Changed("format") && format != output:
		return "", &exitError{code: ExitUsage, err: fmt.Errorf("--format %s and -o %s: give one of them", format, output)}
	}
	return output, nil
}
