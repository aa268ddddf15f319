package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func newSubmitCmd() *cobra.Command {
	var cf connFlags
	var vf *varFlags
	var watch, quiet, check, diff bool
	var output string
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Submit a composition and print its workflow id",
		Long: `submit sends a composition (YAML or JSON; "-" reads standard input) to the
planner. It prints the workflow id, or every problem when the composition is
rejected (exit 1; nothing is written or run; exit 3 when FILE cannot be
read); with --quiet only the id, for scripts: id=$(gantry submit -q FILE);
with -o json (or yaml) the planner's reply: {"workflow_id", "status",
"plan", "warnings", "trace_id"}. With --watch it then streams
the run until it ends, and exits non-zero unless it succeeded: 1 when it
failed or was cancelled, 4 when an operation: check run found something
that would change.

The workflow is one OpenTelemetry trace, whose id submit prints ("trace
ID") when anything traces it. With OTEL_EXPORTER_OTLP_ENDPOINT set (or
OTEL_TRACES_EXPORTER=console, which prints the spans on stderr), submit
records a "gantry submit" span and the workflow's spans hang under it;
TRACEPARENT (and TRACESTATE), when set, make the submit part of that trace
instead of a new one.

--var name=value and --var-file FILE (a YAML or JSON mapping) set vars over
the composition's and every host's (an inventory's too); the composition is
then checked here and sent with them as extra_vars, which the workflow
keeps (gantry status shows them, a secret-looking name's value as ***).

--check submits the composition as an operation: check (what would change,
nothing changed) and watches it: exit 4 when something would change. With
--diff each file a node places that would change is shown as a unified diff
(a secret file's only as "content differs"); gantry status shows them too.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if quiet && cmd.Flags().Changed("output") {
				return &exitError{code: ExitUsage, err: errors.New("--quiet and -o: give one of them")}
			}
			if diff && !check {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--diff shows what --check would change: give both")}
			}
			var edits []composition.Edit
			if check {
				edits, watch = append(edits, checkEdit(diff)), true
			}
			data, err := vf.readForSubmit(cmd.ErrOrStderr(), args[0], edits...)
			if err != nil {
				return err
			}
			cl, err := cf.connectOperator()
			if err != nil {
				return err
			}
			defer cl.Close()
			since := time.Now().Add(-time.Second)
			reply, err := sendComposition(cmd.Context(), cmd.ErrOrStderr(), cl, sent{file: args[0], data: data})
			if err != nil {
				return err
			}
			if err := printAccepted(cmd.OutOrStdout(), reply, output, quiet, watch); err != nil {
				return err
			}
			if !watch {
				return nil
			}
			return watchWorkflow(cmd, cl, reply.WorkflowID, since, 1, output)
		},
	}
	cf.add(cmd)
	vf = addVarFlags(cmd)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "stream the run until it ends")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the workflow id")
	outputFlag(cmd, &output, "text", formatJSON)
	cmd.Flags().BoolVar(&check, "check", false, "run as operation: check (nothing changes) and watch it; exit 4 when something would change")
	cmd.Flags().BoolVar(&diff, "diff", false, "with --check: show a unified diff of each file that would change")
	return cmd
}

// printAccepted prints an accepted submission: its id and plan, and its
// trace when it has one; only the id (quiet); or the reply as JSON or YAML
// (as a record of the stream that follows, with watch).
func printAccepted(w io.Writer, reply events.SubmitReply, format string, quiet, watch bool) error {
	switch {
	case quiet:
		linef(w, "%s", reply.WorkflowID)
	case structured(format) && watch:
		b, err := json.Marshal(reply)
		if err != nil {
			return err
		}
		return printRecord(w, format, b)
	case structured(format):
		return printAs(w, format, reply)
	default:
		linef(w, "accepted %s (%s)", reply.WorkflowID, reply.Plan)
		if reply.TraceID != "" {
			linef(w, "trace %s", reply.TraceID)
		}
	}
	return nil
}

// sent is a composition to submit: its document, and the file its
// problems are reported against ("what" names it in the verdict, file
// when empty).
type sent struct {
	file, what string
	data       []byte
}

// sendComposition submits a composition to the planner, as one trace (see
// trace.go), and returns its reply; the planner's warnings about an
// accepted one are printed on stderr. A rejection prints each problem on
// stderr after the file and is an ExitFailed error; a planner that cannot
// take it, ExitProblem.
func sendComposition(ctx context.Context, stderr io.Writer, cl *client.Client, s sent) (events.SubmitReply, error) {
	tr := startSubmitTrace(stderr)
	reply, err := cl.Submit(ctx, s.data, tr.header)
	tr.end(reply.WorkflowID, err)
	var se *client.ServiceError
	if errors.As(err, &se) {
		if rejected, ok := client.Rejected(err); ok && errors.Is(se, client.ErrBadRequest) && rejected.Status == "rejected" {
			reply = rejected
			for _, m := range reply.Errors {
				linef(stderr, "%s: %s", s.file, m)
			}
			return reply, failed("%s rejected: %d problem(s); nothing was run", cmp.Or(s.what, s.file), len(reply.Errors))
		}
		return reply, &exitError{code: ExitProblem, err: fmt.Errorf("planner: %s", se.Description)}
	}
	if errors.Is(err, nats.ErrTimeout) {
		return reply, &exitError{code: ExitProblem, err: fmt.Errorf("no answer from the planner within %s: it may still have accepted the workflow; gantry list shows it if so", cl.Timeout())}
	}
	for _, w := range reply.Warnings {
		linef(stderr, "warning: %s", w)
	}
	return reply, busErr(err)
}

// readComposition reads a composition to send, refusing one over the size
// limit here with the rule (NATS would refuse it as "maximum payload
// exceeded"). A composition that names an inventory is sent as JSON with
// the inventory inlined (the services cannot read this machine's files),
// and only once it is valid: its problems are printed here, with the file
// and line of each, as gantry validate prints them.
func readComposition(stderr io.Writer, path string) ([]byte, error) {
	data, inlined, err := composition.ReadForSubmitWarn(path, warnTo(stderr))
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
