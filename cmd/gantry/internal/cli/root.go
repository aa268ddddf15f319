// Package cli defines the gantry commands.
package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailed  = 1 // the command ran and the answer is "no": invalid input, a failed run
	ExitUsage   = 2 // bad flags or arguments
	ExitProblem = 3 // the command could not do its work (unreadable file, no server)
	ExitChanges = 4 // an operation: check run found something that would change
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// failed returns an error that makes gantry exit with ExitFailed after the
// command has already printed what went wrong.
func failed(format string, args ...any) error {
	return &exitError{code: ExitFailed, err: fmt.Errorf(format, args...)}
}

// Execute runs gantry with args and returns the process exit code.
func Execute(args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.code != ExitFailed || ee.err.Error() != "" {
			printError(stderr, ee.err)
		}
		return ee.code
	}
	// Anything else cobra returns is a usage problem: unknown command or flag.
	printError(stderr, err)
	fmt.Fprintln(stderr, "Run 'gantry --help' for usage.")
	return ExitUsage
}

// printError prints err as "gantry: ...". An error may quote what a host,
// a service or a composition said: its control characters are shown
// escaped, and a line after the first is indented.
func printError(stderr io.Writer, err error) {
	fmt.Fprintln(stderr, "gantry:", termsafe.Lines(err.Error(), "  "))
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "gantry",
		Short: "gantry provisions fleets of hosts from a DAG",
		Long: `gantry provisions fleets of hosts from a DAG of formulas: it plans a
composition, runs every node on its host over SSH, holds dependents back
until health gates pass, and publishes every transition on NATS.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Version(),
	}
	// --version prints what gantry version does.
	root.SetVersionTemplate(versionText())
	root.AddCommand(newValidateCmd(), newPlanCmd(), newInventoryCmd(), newSubmitCmd(), newExecCmd(), newWatchCmd(), newLogsCmd(), newStatusCmd(), newListCmd(), newStateCmd(), newDriftCmd(), newReconcileCmd(), newPruneCmd(), newDevCmd(), newUICmd(), newPingCmd(), newAuthCmd(),
		newControlCmd(events.VerbCancel), newControlCmd(events.VerbPause), newControlCmd(events.VerbResume), newControlCmd(events.VerbRetry), newVersionCmd())
	return root
}
