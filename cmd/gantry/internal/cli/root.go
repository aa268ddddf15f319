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

// Exit codes, the same for every command (gantry help exit-codes).
const (
	ExitOK      = 0
	ExitFailed  = 1 // the command ran and the answer is "no": invalid input, a failed run
	ExitUsage   = 2 // bad flags or arguments, an ambiguous workflow id prefix
	ExitProblem = 3 // the command could not do its work (unreadable file, no server)
	ExitChanges = 4 // an operation: check run found something that would change
	// ExitInterrupted: stopped with Ctrl-C (SIGINT), as a shell reports a
	// command SIGINT ended.
	ExitInterrupted = 130
)

// exitCodesHelp is what gantry help exit-codes prints.
const exitCodesHelp = `Every gantry command exits with one of these codes:

  0    done: the command did what was asked (a watched workflow succeeded)
  1    the workflow failed or was cancelled, or the input is invalid (a
       composition, inventory or --var-file with problems); a drift that
       could not ask some hosts (unreachable) and found nothing else
  2    usage error: an unknown command or flag, a missing or extra
       argument, a bad flag value, a workflow id prefix that more than one
       workflow's id starts with (the error lists them)
  3    cannot read an input (a missing or unreadable file) or reach the
       server (NATS, or a service that does not answer); the server
       refused this identity the request (a viewer's cancel); a watch's
       --timeout passed
  4    an operation: check run found something that would change; a
       drift found nodes changed, missing or orphaned
  130  interrupted (Ctrl-C); a workflow being watched keeps running

A workflow id may be given as any unique prefix of it (as gantry list
prints them) wherever a command takes one; a prefix no workflow's id starts
with is exit 1, as a workflow that does not exist.`

// newExitCodesTopic is the help topic "exit-codes".
func newExitCodesTopic() *cobra.Command {
	return &cobra.Command{
		Use:   "exit-codes",
		Short: "The exit codes of every gantry command",
		Long:  exitCodesHelp,
	}
}

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
	classifyErrors(root)
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
		newControlCmd(events.VerbCancel), newControlCmd(events.VerbPause), newControlCmd(events.VerbResume), newControlCmd(events.VerbRetry), newVersionCmd(),
		newExitCodesTopic())
	return root
}
