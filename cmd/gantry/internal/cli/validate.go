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
	var output string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check compositions and list every problem",
		Long: `validate checks each composition (YAML or JSON; "-" reads standard input)
and prints a one-line summary for a valid one, or every problem with its
path and line. It exits 1 when any file is invalid, and 3 when a file
cannot be read (missing, a directory, no permission). --var and --var-file
set vars over the composition's and its hosts', as on submit. -o json (or
yaml) prints a verdict per file: {"file", "valid", "summary", "problems"}.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := vf.values(); err != nil {
				return err
			}
			verdicts := make([]validation, len(args))
			bad, unread := 0, 0
			for i, file := range args {
				verdicts[i] = validateFile(cmd.ErrOrStderr(), file, vf)
				if !verdicts[i].Valid {
					bad++
				}
				if verdicts[i].unreadable {
					unread++
				}
			}
			if err := printValidations(cmd, output, verdicts); err != nil {
				return err
			}
			switch {
			case unread > 0:
				return &exitError{code: ExitProblem, err: fmt.Errorf("%d of %d file(s) could not be read", unread, len(args))}
			case bad > 0:
				return failed("%d of %d file(s) invalid", bad, len(args))
			}
			return nil
		},
	}
	vf = addVarFlags(cmd)
	outputFlag(cmd, &output, "text", formatJSON)
	return cmd
}

// validation is the verdict on one file, as -o json prints it.
type validation struct {
	File     string        `json:"file"`
	Valid    bool          `json:"valid"`
	Summary  string        `json:"summary,omitempty"`  // the plan's, when valid
	Problems []dag.Problem `json:"problems,omitempty"` // every problem, when invalid
	Error    string        `json:"error,omitempty"`    // why it could not be read or checked

	unreadable bool
	err        error
}

// validateFile checks one file; what it could not read is unreadable.
func validateFile(stderr io.Writer, file string, vf *varFlags) validation {
	plan, err := loadPlan(stderr, file, vf)
	if err == nil {
		return validation{File: file, Valid: true, Summary: plan.String()}
	}
	v := validation{File: file, err: err, unreadable: unreadable(err)}
	var inv *dag.InvalidError
	if errors.As(err, &inv) {
		v.Problems = inv.Problems
	} else {
		v.Error = err.Error()
	}
	return v
}

// printValidations prints the verdicts: a line per valid file on stdout
// and every problem on stderr, or all of them as JSON or YAML.
func printValidations(cmd *cobra.Command, format string, vs []validation) error {
	if structured(format) {
		return printAs(cmd.OutOrStdout(), format, vs)
	}
	for _, v := range vs {
		if v.Valid {
			linef(cmd.OutOrStdout(), "%s: valid: %s", v.File, v.Summary)
		} else {
			printProblems(cmd.ErrOrStderr(), v.File, v.err)
		}
	}
	return nil
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
