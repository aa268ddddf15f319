package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

func newWatchCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "watch WORKFLOW_ID",
		Short: "Stream a workflow's progress until it ends",
		Long: `watch prints every formula, node and health transition of a workflow as it
happens (from its start, so nothing is missed), and exits when the workflow
ends: 0 when it succeeded, 1 when it failed or was cancelled. After a retry it
follows the newest run (generation): the end of an earlier one is shown but
does not stop it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			since, gen := watchStart(cmd.Context(), nc, args[0], cf)
			return watchWorkflow(cmd, nc, args[0], since, gen)
		},
	}
	cf.add(cmd)
	return cmd
}

// watchStart is when to start reading a workflow's events (just before it
// was created, per the state-store, else a day back) and the run generation
// whose end the watch waits for: the planner's snapshot has it as soon as a
// retry is accepted, before the state-store has seen the retry's events.
func watchStart(ctx context.Context, nc *nats.Conn, id string, cf connFlags) (time.Time, int) {
	since, gen := time.Now().Add(-24*time.Hour), 1
	var doc events.WorkflowDoc
	if err := request(nc, events.StateWorkflow, mustJSON(events.WorkflowQuery{WorkflowID: id}), cf.timeout, &doc); err == nil {
		since, gen = doc.CreatedAt.Add(-time.Second), max(doc.Generation, 1)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	if js, err := jetstream.New(nc); err == nil {
		if kv, err := js.KeyValue(ctx, events.BucketRuns); err == nil {
			if e, err := kv.Get(ctx, id); err == nil {
				var run events.RunSnapshot
				if json.Unmarshal(e.Value(), &run) == nil {
					gen = max(gen, run.Generation)
				}
			}
		}
	}
	return since, gen
}

// watchWorkflow reads the events of one workflow from the event stream,
// starting at since, prints them, and returns when run generation gen (or a
// later one) ends.
func watchWorkflow(cmd *cobra.Command, nc *nats.Conn, id string, since time.Time, gen int) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.WorkflowLifecycle(id), events.AllHostLifecycle, events.AllHealth},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
	})
	if err != nil {
		return &exitError{code: ExitProblem, err: fmt.Errorf("watch: %w", err)}
	}
	msgs, err := cons.Messages()
	if err != nil {
		return &exitError{code: ExitProblem, err: fmt.Errorf("watch: %w", err)}
	}
	go func() { <-ctx.Done(); msgs.Stop() }()
	out := cmd.OutOrStdout()
	for {
		m, err := msgs.Next()
		if err != nil {
			if ctx.Err() != nil {
				return failed("watch interrupted")
			}
			return &exitError{code: ExitProblem, err: fmt.Errorf("watch: %w", err)}
		}
		env, err := events.Parse(m.Data())
		if err != nil || !strings.HasPrefix(env.Subject, id) {
			continue
		}
		if st, g, done := printEvent(out, env); done && g >= gen {
			if st == dag.WorkflowSucceeded {
				return nil
			}
			return failed("workflow %s %s", id, st)
		}
	}
}

// printEvent prints one event as a line; done is set for the end of a
// workflow's run generation gen.
func printEvent(w io.Writer, env *events.Envelope) (st dag.WorkflowState, gen int, done bool) {
	ts := env.Time.Local().Format("15:04:05.000")
	switch env.Type.Family() {
	case events.FamilyWorkflow:
		var e events.WorkflowEvent
		if events.DecodeData(env, &e) != nil {
			return "", 0, false
		}
		line := fmt.Sprintf("%s workflow %s %s", ts, e.Workflow, strings.ToUpper(string(e.Status)))
		if e.Generation > 1 {
			line += fmt.Sprintf(" (run %d)", e.Generation)
		}
		if e.Reason != "" {
			line += ": " + e.Reason
		}
		fmt.Fprintln(w, line)
		return e.Status, e.Generation, e.Status.Terminal()
	case events.FamilyFormula:
		var e events.FormulaEvent
		if events.DecodeData(env, &e) != nil {
			return "", 0, false
		}
		line := fmt.Sprintf("%s %-12s %-28s %s", ts, e.Ref.Host, e.Formula, e.Status)
		if e.Blocker != "" {
			line += " (" + blockerText(e.Status, e.Blocker) + ")"
		}
		if e.Error != "" {
			line += ": " + e.Error
		}
		fmt.Fprintln(w, line)
	case events.FamilyNode:
		var e events.NodeEvent
		if events.DecodeData(env, &e) != nil {
			return "", 0, false
		}
		line := fmt.Sprintf("%s %-12s %-28s %s", ts, e.Ref.Host, e.Formula+"/"+e.Node, e.Status)
		n := e.GenAttempt
		if n == 0 { // from an executor that does not say
			n = e.Attempt
		}
		switch {
		case e.Status == dag.NodeRunning && n > 1:
			line += fmt.Sprintf(" (attempt %d of %d)", n, e.MaxAttempts)
		case e.WillRetry:
			line += fmt.Sprintf(" (attempt %d of %d, will retry)", n, e.MaxAttempts)
		}
		if e.Check != "" {
			line += " [" + string(e.Check) + "]"
		}
		if e.Reason != "" {
			line += ": " + e.Reason
		}
		if e.Error != "" {
			line += ": " + firstLine(e.Error)
		}
		if e.Status == dag.NodeFailed && e.StderrTail != "" {
			line += "\n      stderr: " + firstLine(lastLine(e.StderrTail))
		}
		fmt.Fprintln(w, line)
	case events.FamilyHealth:
		var e events.HealthEvent
		if events.DecodeData(env, &e) != nil {
			return "", 0, false
		}
		kind := "health check"
		if e.Final {
			kind = "health gate"
		}
		line := fmt.Sprintf("%s %-12s %-28s %s %s (%d/%d)", ts, e.Ref.Host, e.Formula, kind, e.Status, e.Attempt, e.Retries)
		if e.Error != "" && e.Final {
			line += ": " + firstLine(e.Error)
		}
		fmt.Fprintln(w, line)
	}
	return "", 0, false
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
