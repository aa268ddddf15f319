package cli

import (
	"github.com/gantry-dev/gantry/pkg/eventbus"

	"context"
	"encoding/json"
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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

func newWatchCmd() *cobra.Command {
	var cf connFlags
	var output string
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
		ValidArgsFunction: completeWorkflowIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
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
				ctx, cancel = context.WithTimeoutCause(ctx, cf.timeout, errWatchTimeout)
				defer cancel()
				cmd.SetContext(ctx)
			}
			since, gen := watchStart(ctx, cl, id)
			return watchWorkflow(cmd, cl, id, since, gen, output)
		},
	}
	cf.add(cmd)
	outputFlag(cmd, &output, "text", "json")
	return cmd
}

// errWatchTimeout ends a watch whose --timeout passed.
var errWatchTimeout = errors.New("the workflow had not ended")

// resolveWorkflow turns what the user typed into a workflow id: an id the
// state-store or the planner knows, else the one id that starts with it.
func resolveWorkflow(ctx context.Context, cl *client.Client, typed string) (string, error) {
	id, _, err := resolveDoc(ctx, cl, typed)
	return id, err
}

// resolveDoc is resolveWorkflow that also returns the workflow's document
// when typed is a whole id (nil otherwise): a command that shows it asks
// the state-store once, within one --timeout.
func resolveDoc(ctx context.Context, cl *client.Client, typed string) (string, *events.WorkflowDoc, error) {
	doc, exact := cl.Status(ctx, typed)
	var se *client.ServiceError
	switch {
	case exact == nil:
		return typed, doc, nil
	case !errors.As(exact, &se) || !errors.Is(se, client.ErrNotFound):
		return "", nil, stateErr(exact) // no state-store answers: nothing to look in
	}
	if runKnown(cl.Conn(), typed, cl.Timeout()) {
		return typed, nil, nil // accepted, not yet seen by the state-store
	}
	rows, err := cl.List(ctx, 100000)
	if err != nil {
		return "", nil, stateErr(err)
	}
	var match []events.WorkflowSummary
	for _, r := range rows {
		if typed != "" && strings.HasPrefix(r.WorkflowID, typed) {
			match = append(match, r)
		}
	}
	switch len(match) {
	case 1:
		return match[0].WorkflowID, nil, nil
	case 0:
		return "", nil, failed("%s (gantry list shows them)", se.Description)
	}
	return "", nil, ambiguous(typed, match)
}

// maxCandidates is how many workflows an ambiguous prefix's error lists.
const maxCandidates = 10

// ambiguous is the usage error of a prefix more than one workflow's id
// starts with, listing them (newest first).
func ambiguous(typed string, match []events.WorkflowSummary) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%q starts the ids of %d workflows; give more of it:", typed, len(match))
	for _, r := range match[:min(len(match), maxCandidates)] {
		fmt.Fprintf(&b, "\n%s  %s  %s  %s", r.WorkflowID, r.Workflow, r.Status, r.CreatedAt.Local().Format(time.DateTime))
	}
	if len(match) > maxCandidates {
		fmt.Fprintf(&b, "\nand %d more", len(match)-maxCandidates)
	}
	return &exitError{code: ExitUsage, err: errors.New(b.String())}
}

// runKnown says whether the planner has a run state for id.
func runKnown(nc *nats.Conn, id string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	kv, err := js.KeyValue(ctx, events.BucketRuns)
	if err != nil {
		return false
	}
	_, err = kv.Get(ctx, id)
	return err == nil
}

// watchStart is when to start reading a workflow's events (just before it
// was created, per the state-store, else a day back) and the run generation
// whose end the watch waits for: the planner's snapshot has it as soon as a
// retry is accepted, before the state-store has seen the retry's events.
func watchStart(ctx context.Context, cl *client.Client, id string) (time.Time, int) {
	if ctx == nil {
		ctx = context.Background()
	}
	since, gen := time.Now().Add(-24*time.Hour), 1
	if doc, err := cl.Status(ctx, id); err == nil {
		since, gen = doc.CreatedAt.Add(-time.Second), max(doc.Generation, 1)
	}
	ctx, cancel := context.WithTimeout(ctx, cl.Timeout())
	defer cancel()
	if js, err := jetstream.New(cl.Conn()); err == nil {
		if kv, err := js.KeyValue(ctx, events.BucketRuns); err == nil {
			if e, err := kv.Get(ctx, id); err == nil {
				if g, ok := runGeneration(e.Value()); ok {
					gen = max(gen, g)
				}
			}
		}
	}
	return since, gen
}

// runGeneration is the run generation of a gantry_runs record, plain or
// compressed (a large fleet's snapshot is).
func runGeneration(record []byte) (int, bool) {
	data, err := eventbus.Unpack(record)
	if err != nil {
		return 0, false
	}
	var run events.RunSnapshot
	if json.Unmarshal(data, &run) != nil {
		return 0, false
	}
	return run.Generation, true
}

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

// printEvent prints one event as a line (a failed node's last line of
// stderr under it), what hosts and the bus said (errors, reasons, output)
// with control characters escaped; done is set for the end of a
// workflow's run generation gen.
func printEvent(w io.Writer, env *events.Envelope) (st dag.WorkflowState, gen int, done bool) {
	ts := env.Time.Local().Format("15:04:05.000")
	pl, _ := env.Payload() // nil, and left out, when it does not decode
	switch e := pl.(type) {
	case *events.WorkflowEvent:
		line := fmt.Sprintf("%s workflow %s %s", ts, e.Workflow, strings.ToUpper(string(e.Status)))
		if e.Generation > 1 {
			line += fmt.Sprintf(" (run %d)", e.Generation)
		}
		if e.Reason != "" {
			line += ": " + e.Reason
		}
		fmt.Fprintln(w, termsafe.Line(line))
		return e.Status, e.Generation, e.Status.Terminal()
	case *events.FormulaEvent:
		line := fmt.Sprintf("%s %-12s %-28s %s", ts, e.Ref.Host, e.Formula, e.Status)
		if e.Blocker != "" {
			line += " (" + blockerText(e.Status, e.Blocker) + ")"
		}
		if e.Error != "" {
			line += ": " + e.Error
		}
		fmt.Fprintln(w, termsafe.Line(line))
	case *events.NodeEvent:
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
		// why, and the error, each said once: "cancelled by operator:
		// killed on the host"
		line += strings.TrimPrefix(summary.Said(string(e.Status), e.Reason, e.Error), string(e.Status))
		line = termsafe.Line(line)
		if e.Status == dag.NodeFailed && e.StderrTail != "" {
			line += "\n      stderr: " + termsafe.Line(firstLine(lastLine(e.StderrTail)))
		}
		fmt.Fprintln(w, line)
		printFiles(w, "      ", e.Files)
	case *events.HealthEvent:
		fmt.Fprint(w, healthLines(ts, e))
	case *events.ProgressEvent:
		fmt.Fprintln(w, termsafe.Line(fmt.Sprintf("%s %-12s %-28s %d%%", ts, e.Ref.Host, e.Formula+"/"+e.Node, e.Percent)))
	case *events.RolloutEvent:
		fmt.Fprintln(w, termsafe.Line(rolloutLine(ts, e)))
	}
	return "", 0, false
}

// Lines of a failing check's output watch shows: of each check, and more
// of the gate's last.
const (
	checkLines = 3
	gateLines  = 8
)

// healthLines is a check of a health gate, or its verdict: a failing one
// with its exit status and the last lines it printed, indented under it,
// and the verdict saying why the gate failed.
func healthLines(ts string, e *events.HealthEvent) string {
	kind := "health check"
	if e.Final {
		kind = "health gate"
	}
	line := fmt.Sprintf("%s %-12s %-28s %s %s (%d/%d)", ts, e.Ref.Host, e.Formula, kind, e.Status, e.Attempt, e.Retries)
	if e.Status != events.HealthFail {
		return termsafe.Line(line) + "\n"
	}
	switch {
	case e.ExitCode != nil:
		line += fmt.Sprintf(": exit %d", *e.ExitCode)
	case e.Error != "" && !e.Final:
		line += ": " + firstLine(e.Error)
	}
	if e.Final {
		line += ": " + e.GateFailure()
	}
	out := termsafe.Line(line) + "\n"
	n := checkLines
	if e.Final {
		n = gateLines
	}
	for _, l := range events.LastLines(e.OutputTail, n) {
		out += "      | " + termsafe.Line(l) + "\n"
	}
	return out
}

// rolloutLine is a rollout's batch starting or finishing, or its stop.
func rolloutLine(ts string, e *events.RolloutEvent) string {
	what := fmt.Sprintf("rollout batch %d/%d", e.Batch, e.Batches)
	switch e.Status {
	case events.RolloutBatchStarted:
		what += " started: " + strings.Join(e.Instances, ", ")
	case events.RolloutBatchFinished:
		what += fmt.Sprintf(" finished (%d failed so far, max_failed %d)", e.Failed, e.MaxFailed)
	case events.RolloutStopped:
		what = "rollout stopped: " + e.Reason
	}
	return fmt.Sprintf("%s %-12s %-28s %s", ts, "", e.Formula, what)
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

// refused says on stderr that an event was dropped because it did not
// come the way its type comes (events.Admit): someone published it where
// it does not belong.
func refused(w io.Writer, err error) {
	fmt.Fprintf(w, "gantry: warning: %s (dropped)\n", termsafe.Line(err.Error()))
}
