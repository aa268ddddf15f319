package cli

import (
	"errors"
	"io"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

var controlHelp = map[string]string{
	events.VerbCancel: "Cancel a workflow: running nodes are killed on their hosts, the rest are cancelled",
	events.VerbPause:  "Pause a workflow: running nodes finish, no new node starts anywhere until it is resumed",
	events.VerbResume: "Resume a paused workflow: nodes start again",
	events.VerbRetry:  "Retry a failed or cancelled workflow: only failed, blocked and cancelled parts run again",
}

func newControlCmd(verb string) *cobra.Command {
	var cf connFlags
	var watch bool
	var nodes []string
	var output string
	cmd := &cobra.Command{
		Use:   verb + " WORKFLOW_ID",
		Short: controlHelp[verb],
		Long: controlHelp[verb] + `.

WORKFLOW_ID may be any unique start of a workflow's id (as gantry list
prints them). It prints the workflow's status and run generation after the
request; -o json (or yaml) prints them as {"workflow_id", "status",
"generation"}. It exits 1 when the planner refuses the request (the
workflow's state does not allow it).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cf.completeWorkflowIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := cf.connectOperator()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx := cmd.Context()
			id, err := resolveWorkflow(ctx, cl, args[0])
			if err != nil {
				return err
			}
			var q *events.ControlRequest
			if len(nodes) > 0 {
				q = &events.ControlRequest{Nodes: nodes}
			}
			reply, err := cl.Control(ctx, id, verb, q)
			var se *client.ServiceError
			if errors.As(err, &se) {
				return failed("%s %s: %s", verb, id, se.Description)
			}
			if err != nil {
				return busErr(err)
			}
			if err := printControlReply(cmd.OutOrStdout(), reply, output, watch); err != nil {
				return err
			}
			if watch && verb != events.VerbPause {
				since, gen := watchStart(ctx, cl, id)
				return watchWorkflow(cmd, cl, id, since, max(gen, reply.Generation), output)
			}
			return nil
		},
	}
	cf.add(cmd)
	outputFlag(cmd, &output, "text", formatJSON)
	if verb != events.VerbPause {
		cmd.Flags().BoolVarP(&watch, "watch", "w", false, "then stream the workflow until it ends")
	}
	if verb == events.VerbPause {
		cmd.Long = `pause stops a running workflow from starting new nodes, on every host:
no formula is dispatched, and a formula already running on an executor
finishes the nodes that run (their commands are not interrupted) and holds
its next ones. A health gate being checked goes on. gantry resume lets
everything go on where it stopped; gantry cancel ends a paused workflow.
The executors' status (nats micro info gantry-executor) lists the formulas
a pause holds.`
	}
	if verb == events.VerbRetry {
		cmd.Flags().StringArrayVar(&nodes, "node", nil, "re-run only this failed node (FORMULA/NODE; repeatable) and what depends on it; other failures stay failed")
		_ = cmd.RegisterFlagCompletionFunc("node", cf.completeNodesOfArg)
		cmd.Long += `

retry starts a new generation of a failed or cancelled workflow. Without
--node it re-runs every failed node, and what they blocked or kept from
starting; succeeded and skipped nodes stay done. With --node FORMULA/NODE
(repeatable) it re-runs only those failed nodes and what depends on them:
later nodes of the same formula that depend on one, and the formulas that
depend on its formula and had not completed. Every other failed, blocked or
cancelled node stays as it was, and if a failure remains the workflow ends
failed again. A node that did not fail, or does not exist, is refused and
nothing starts.`
	}
	return cmd
}

// printControlReply prints what a control request led to: as text, or as
// JSON or YAML (a record of the stream that follows, with watch).
func printControlReply(w io.Writer, reply events.ControlReply, format string, watch bool) error {
	switch {
	case structured(format) && watch:
		return printRecord(w, format, mustJSON(reply))
	case structured(format):
		return printAs(w, format, reply)
	}
	linef(w, "%s: %s (generation %d)", reply.WorkflowID, reply.Status, reply.Generation)
	return nil
}
