package cli

import (
	"encoding/json"
	"errors"

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
	cmd := &cobra.Command{
		Use:   verb + " WORKFLOW_ID",
		Short: controlHelp[verb],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := cf.connectOperator()
			if err != nil {
				return err
			}
			defer nc.Close()
			var body []byte
			if len(nodes) > 0 {
				body, _ = json.Marshal(events.ControlRequest{Nodes: nodes})
			}
			var reply events.ControlReply
			err = request(nc, events.WorkflowControl(args[0], verb), body, cf.timeout, &reply)
			var se *serviceError
			if errors.As(err, &se) {
				return failed("%s %s: %s", verb, args[0], se.Description)
			}
			if err != nil {
				return err
			}
			linef(cmd.OutOrStdout(), "%s: %s (generation %d)", reply.WorkflowID, reply.Status, reply.Generation)
			if watch && verb != events.VerbPause {
				since, gen := watchStart(cmd.Context(), nc, args[0], cf)
				return watchWorkflow(cmd, nc, args[0], since, max(gen, reply.Generation), false)
			}
			return nil
		},
	}
	cf.add(cmd)
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
		cmd.Long = `retry starts a new generation of a failed or cancelled workflow. Without
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
