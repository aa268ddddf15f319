package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/summary"
	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

func newWatchCmd() *cobra.Command {
	var cf connFlags
	var output string
	var limit time.Duration // --timeout: how long the watch may last
	cmd := &cobra.Command{
		Use:   "watch WORKFLOW_ID",
		Short: "Stream a workflow's progress until it ends",
		Long: `watch prints every formula, node and health transition of a workflow as it
happens (from its start, so nothing is missed), and exits when the workflow
ends: 0 when it succeeded, 1 when it failed or was cancelled, 4 when an
operation: check run found something that would change. After a retry it
follows the newest run (generation): the end of an earlier one is shown but
does not stop it. WORKFLOW_ID may be the start of an id (as gantry list
prints them) when only one workflow's id starts so; an id no workflow has
is an error at once. With --timeout, watch gives up (exit 3) when the
workflow has not ended by then; without it, it waits as long as it takes.

A node's progress (the percent of a "PROGRESS: n" line it printed) shows
as a line "HOST FORMULA/NODE n%". A summary of the nodes ("-- 3/10 nodes
done, 2 running, 1 failed") follows the events: on a terminal as one line
kept up to date under them; otherwise (CI logs, a pipe) printed when it has
changed, at most every 10 seconds, and at the end. Ctrl-C stops the watch,
not the workflow: it says how to follow or cancel it, and exits 130. What
hosts said (errors, reasons, a failed node's last line of stderr) is shown
with control characters escaped (\x1b), as gantry logs shows output.

-o json prints each event as it is on the bus (a CloudEvent, one JSON
object per line; DEL, C1 controls and bytes that are not UTF-8 as JSON
escapes) and the summary on stderr; -o yaml, each as a YAML document.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cf.completeWorkflowIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("timeout") && limit <= 0 {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--timeout %s: give a time above 0, or leave it out to wait as long as it takes", limit)}
			}
			cl, err := cf.connect()
			if err != nil {
				return err
			}
			defer cl.Close()
			id, err := resolveWorkflow(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if cmd.Flags().Changed("timeout") {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeoutCause(ctx, limit, errWatchTimeout)
				defer cancel()
				cmd.SetContext(ctx)
			}
			since, gen := watchStart(ctx, cl, id)
			return watchWorkflow(cmd, cl, id, since, gen, output)
		},
	}
	cf.addConn(cmd) // watch's --timeout bounds the watch; each reply waits defaultReplyTimeout
	cmd.Flags().DurationVar(&limit, "timeout", 0, "give up (exit 3) when the workflow has not ended by then (default: wait as long as it takes)")
	outputFlag(cmd, &output, "text", "json")
	return cmd
}

// errWatchTimeout ends a watch whose --timeout passed.
var errWatchTimeout = errors.New("the workflow had not ended")

// watchWorkflow reads the events of one workflow from the event stream,
// starting at since, prints them with a summary of its nodes, and returns
// when run generation gen (or a later one) ends. Ctrl-C stops the watch,
// not the workflow: it says so and exits with ExitInterrupted.
//
// format json prints each event's CloudEvent as one line of JSON
// instead (yaml: as a YAML document), and the summary on stderr.
func watchWorkflow(cmd *cobra.Command, cl *client.Client, id string, since time.Time, gen int, format string) error {
	asJSON := structured(format)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	feed, err := openEventFeed(ctx, cl, id, since, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	var sum summary.Tally
	status := newStatusLine(out)
	if asJSON {
		status = newStatusLine(cmd.ErrOrStderr())
	}
	changes := map[string]bool{} // nodes an operation: check run says would change
	for {
		m, env, err := feed.nextEvent()
		if err != nil {
			status.end(sum.Summary().String(), time.Now())
			if errors.Is(context.Cause(ctx), errWatchTimeout) {
				return &exitError{code: ExitProblem, err: fmt.Errorf("watch %s: %w after --timeout", id, errWatchTimeout)}
			}
			if ctx.Err() != nil {
				return interrupted(id)
			}
			return err
		}
		if sum.Observe(env) {
			continue // the same event stored again: shown once
		}
		if node, ok := wouldChange(env); ok {
			changes[node] = true
		}
		status.clear()
		var st dag.WorkflowState
		var g int
		var done bool
		if asJSON {
			st, g, done = workflowEnd(env)
			if err := printRecord(out, format, m.Data); err != nil {
				return err
			}
		} else {
			st, g, done = printEvent(out, env)
		}
		if done && g >= gen {
			final := sum.Summary()
			status.end(final.String(), time.Now())
			if line := final.FailedLine(id); line != "" {
				status.note(termsafe.Line(line))
			}
			switch {
			case st != dag.WorkflowSucceeded:
				return failed("workflow %s %s", id, st)
			case len(changes) > 0:
				return &exitError{code: ExitChanges, err: fmt.Errorf("check: %d node(s) would change", len(changes))}
			}
			return nil
		}
		if now := time.Now(); status.due(now) {
			status.show(sum.Summary().String(), now)
		}
	}
}

// eventFeed is one workflow's events, read from the event stream from a
// start time on: its workflow, formula, node, health and progress events,
// each admitted (events.Admit) before it is given out.
type eventFeed struct {
	id   string
	feed *client.Feed
}

// openEventFeed starts reading workflow id's events from since; the feed
// stops when ctx ends. Events of the workflow refused by events.Admit
// (forged or misrouted: never shown as news) are reported on stderr.
func openEventFeed(ctx context.Context, cl *client.Client, id string, since time.Time, stderr io.Writer) (*eventFeed, error) {
	feed, err := cl.Follow(ctx, client.FollowOptions{
		Stream:   events.StreamEvents,
		Subjects: []string{events.WorkflowLifecycle(id), events.AllHostLifecycle, events.AllHealth},
		Since:    since,
		Skipped: func(m *client.Message, err error) {
			if m.Envelope != nil && strings.HasPrefix(m.Envelope.Subject, id) {
				refused(stderr, err)
			}
		},
	})
	if err != nil {
		return nil, &exitError{code: ExitProblem, err: fmt.Errorf("watch: %w", err)}
	}
	return &eventFeed{id: id, feed: feed}, nil
}

// nextEvent waits for the workflow's next event. An error (ExitProblem) means
// the feed has stopped: its context ended, or the stream failed.
func (f *eventFeed) nextEvent() (*client.Message, *events.Envelope, error) {
	for {
		m, err := f.feed.Next()
		if err != nil {
			return nil, nil, &exitError{code: ExitProblem, err: fmt.Errorf("watch: %w", err)}
		}
		if strings.HasPrefix(m.Envelope.Subject, f.id) {
			return m, m.Envelope, nil
		}
	}
}

// interrupted is the error of a watch stopped with Ctrl-C: the workflow
// goes on.
func interrupted(id string) error {
	return &exitError{code: ExitInterrupted, err: fmt.Errorf("workflow %s keeps running; gantry watch %s to follow it again, gantry cancel %s to stop it", id, id, id)}
}

// workflowEnd says whether an event is the end of a workflow's run
// generation, and its state.
func workflowEnd(env *events.Envelope) (dag.WorkflowState, int, bool) {
	pl, _ := env.Payload()
	e, ok := pl.(*events.WorkflowEvent)
	if !ok {
		return "", 0, false
	}
	return e.Status, e.Generation, e.Status.Terminal()
}

// wouldChange says whether an event is a check run's verdict that its node
// would change, and which node.
func wouldChange(env *events.Envelope) (string, bool) {
	if env.Type != events.NodeType(dag.NodeSucceeded) {
		return "", false
	}
	var e events.NodeEvent
	if events.DecodeData(env, &e) != nil || e.Check != events.CheckWouldChange {
		return "", false
	}
	return e.Formula + "/" + e.Node, true
}

// Lines of a failing check's output watch shows: of each check, and more
// of the gate's last.
const (
	checkLines = 3
	gateLines  = 8
)
