package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

func newSubmitCmd() *cobra.Command {
	var cf connFlags
	var vf *varFlags
	var watch, quiet bool
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Submit a composition and print its workflow id",
		Long: `submit sends a composition (YAML or JSON; "-" reads standard input) to the
planner. It prints the workflow id, or every problem when the composition is
rejected (exit 1; nothing is written or run); with --quiet only the id, for
scripts: id=$(gantry submit -q FILE). With --watch it then streams
the run until it ends, and exits non-zero unless it succeeded: 1 when it
failed or was cancelled, 4 when an operation: check run found something
that would change.

The workflow is one OpenTelemetry trace. With OTEL_EXPORTER_OTLP_ENDPOINT
set, submit records a "gantry submit" span there and the workflow's spans
hang under it; TRACEPARENT (and TRACESTATE), when set, make the submit
part of that trace instead of a new one.

--var name=value and --var-file FILE (a YAML or JSON mapping) set vars over
the composition's and every host's (an inventory's too); the composition is
then checked here and sent with them as extra_vars, which the workflow
keeps (gantry status shows them, a secret-looking name's value as ***).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := vf.readForSubmit(cmd.ErrOrStderr(), args[0])
			if err != nil {
				return err
			}
			nc, err := cf.connectOperator()
			if err != nil {
				return err
			}
			defer nc.Close()
			since := time.Now().Add(-time.Second)
			var reply events.SubmitReply
			tr := startSubmitTrace(cmd.ErrOrStderr())
			err = requestWith(nc, events.SubjectSubmit, data, tr.header, cf.timeout, &reply)
			tr.end(reply.WorkflowID, err)
			var se *serviceError
			if errors.As(err, &se) {
				if se.Code == "400" && json.Unmarshal(se.Body, &reply) == nil && reply.Status == "rejected" {
					for _, m := range reply.Errors {
						linef(cmd.ErrOrStderr(), "%s: %s", args[0], m)
					}
					return failed("%s rejected: %d problem(s); nothing was run", args[0], len(reply.Errors))
				}
				return &exitError{code: ExitProblem, err: fmt.Errorf("planner: %s", se.Description)}
			}
			if err != nil {
				return err
			}
			if quiet {
				linef(cmd.OutOrStdout(), "%s", reply.WorkflowID)
			} else {
				linef(cmd.OutOrStdout(), "accepted %s (%s)", reply.WorkflowID, reply.Plan)
			}
			if !watch {
				return nil
			}
			return watchWorkflow(cmd, nc, reply.WorkflowID, since, 1, false)
		},
	}
	cf.add(cmd)
	vf = addVarFlags(cmd)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "stream the run until it ends")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the workflow id")
	return cmd
}

// readComposition reads a composition to send, refusing one over the size
// limit here with the rule (NATS would refuse it as "maximum payload
// exceeded"). A composition that names an inventory is sent as JSON with
// the inventory inlined (the services cannot read this machine's files),
// and only once it is valid: its problems are printed here, with the file
// and line of each, as gantry validate prints them.
func readComposition(stderr io.Writer, path string) ([]byte, error) {
	data, inlined, err := composition.ReadForSubmit(path)
	if err != nil && !inlined {
		return nil, &exitError{code: ExitProblem, err: err}
	}
	return checkedForSubmit(stderr, path, data, err)
}

// checkedForSubmit is what was read to be sent (data, or err with every
// problem found here, printed with their lines), refused over the size
// limit.
func checkedForSubmit(stderr io.Writer, path string, data []byte, err error) ([]byte, error) {
	if err != nil {
		var bad *dag.InvalidError
		if errors.As(err, &bad) {
			printProblems(stderr, path, err)
			return nil, failed("%s rejected: %d problem(s); nothing was run", path, len(bad.Problems))
		}
		return nil, &exitError{code: ExitProblem, err: err}
	}
	if len(data) > dag.DefaultMaxBytes { // ReadFile stops reading one byte past the limit
		return nil, failed("%s rejected: the composition is over the %d-byte (1 MiB) limit; nothing was run", path, dag.DefaultMaxBytes)
	}
	return data, nil
}
