package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/spf13/cobra"
)

func newValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check compositions and list every problem",
		Long: `validate checks each composition (YAML or JSON; "-" reads standard input)
and prints a one-line summary for a valid one, or every problem with its
path and line. It exits 1 when any file is invalid.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := 0
			for _, file := range args {
				if !validateFile(cmd.OutOrStdout(), cmd.ErrOrStderr(), file) {
					bad++
				}
			}
			if bad > 0 {
				return failed("%d of %d file(s) invalid", bad, len(args))
			}
			return nil
		},
	}
}

func validateFile(stdout, stderr io.Writer, file string) bool {
	plan, err := loadPlan(stderr, file)
	if err != nil {
		printProblems(stderr, file, err)
		return false
	}
	linef(stdout, "%s: valid: %s", file, plan)
	return true
}

// loadPlan reads, validates and plans one composition file, printing the
// warnings of the inventory it names on stderr.
func loadPlan(stderr io.Writer, file string) (*dag.Plan, error) {
	c, err := composition.LoadFileWarn(file, warnTo(stderr))
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
