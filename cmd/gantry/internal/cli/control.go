package cli

import (
	"errors"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

var controlHelp = map[string]string{
	events.VerbCancel: "Cancel a workflow: running nodes are killed on their hosts, the rest are cancelled",
	events.VerbPause:  "Pause a workflow: nothing new is dispatched until it is resumed",
	events.VerbResume: "Resume a paused workflow",
	events.VerbRetry:  "Retry a failed or cancelled workflow: only failed, blocked and cancelled parts run again",
}

func newControlCmd(verb string) *cobra.Command {
	var cf connFlags
	var watch bool
	cmd := &cobra.Command{
		Use:   verb + " WORKFLOW_ID",
		Short: controlHelp[verb],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			var reply events.ControlReply
			err = request(nc, events.WorkflowControl(args[0], verb), nil, cf.timeout, &reply)
			var se *serviceError
			if errors.As(err, &se) {
				return failed("%s %s: %s", verb, args[0], se.Description)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (generation %d)\n", reply.WorkflowID, reply.Status, reply.Generation)
			if watch && verb != events.VerbPause {
				since, gen := watchStart(cmd.Context(), nc, args[0], cf)
				return watchWorkflow(cmd, nc, args[0], since, max(gen, reply.Generation))
			}
			return nil
		},
	}
	cf.add(cmd)
	if verb != events.VerbPause {
		cmd.Flags().BoolVarP(&watch, "watch", "w", false, "then stream the workflow until it ends")
	}
	return cmd
}
