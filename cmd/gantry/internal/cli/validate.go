package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/spf13/cobra"
)

func newValidateCmd() *cobra.Command {
	var vf *varFlags
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check compositions and list every problem",
		Long: `validate checks each composition (YAML or JSON; "-" reads standard input)
and prints a one-line summary for a valid one, or every problem with its
path and line. It exits 1 when any file is invalid. --var and --var-file
set vars over the composition's and its hosts', as on submit.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := vf.values(); err != nil {
				return err
			}
			bad := 0
			for _, file := range args {
				if !validateFile(cmd.OutOrStdout(), cmd.ErrOrStderr(), file, vf) {
					bad++
				}
			}
			if bad > 0 {
				return failed("%d of %d file(s) invalid", bad, len(args))
			}
			return nil
		},
	}
	vf = addVarFlags(cmd)
	return cmd
}

func validateFile(stdout, stderr io.Writer, file string, vf *varFlags) bool {
	plan, err := loadPlan(stderr, file, vf)
	if err != nil {
		printProblems(stderr, file, err)
		return false
	}
	linef(stdout, "%s: valid: %s", file, plan)
	return true
}

// loadPlan reads, validates and plans one composition file, with the
// extra vars of vf, printing the warnings of the inventory it names on
// stderr.
func loadPlan(stderr io.Writer, file string, vf *varFlags) (*dag.Plan, error) {
	c, err := vf.loadFile(file, warnTo(stderr))
	if err != nil {
		return nil, err
	}
	return dag.PlanLoaded(c), nil
}

// warnTo prints an inventory's warnings as printWarnings does.
func warnTo(w io.Writer) func(dag.Problem) {
	return func(p dag.Problem) { printWarnings(w, []dag.Problem{p}) }
}

// printProblems prints every problem as "file:line: path: message", the
// form editors and CI logs link to, with control characters of what it
// quotes shown escaped.
func printProblems(w io.Writer, file string, err error) {
	var inv *dag.InvalidError
	if !errors.As(err, &inv) {
		fmt.Fprintf(w, "%s: %s\n", termsafe.Line(file), termsafe.Lines(err.Error(), "  "))
		return
	}
	for _, p := range inv.Problems {
		loc := file
		if p.File != "" { // the inventory the composition names
			loc = p.File
		}
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d", loc, p.Line)
		}
		path := p.Path
		if path == "" {
			path = "(document)"
		}
		linef(w, "%s: %s: %s", loc, path, p.Message)
	}
	linef(w, "%s: %d problem(s)", file, len(inv.Problems))
}
