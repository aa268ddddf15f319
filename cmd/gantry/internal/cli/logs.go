package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func newLogsCmd() *cobra.Command {
	var cf connFlags
	var follow bool
	var output, host string
	cmd := &cobra.Command{
		Use:   "logs WORKFLOW_ID [FORMULA | FORMULA/NODE | FORMULA/gate | HOST] [--host HOST]",
		Short: "Print the output lines of a workflow's nodes",
		Long: `logs prints the output lines of a workflow's nodes (of one formula's
nodes, with FORMULA; of one node, with FORMULA/NODE), in the order they
were published, each after its time, host, formula/node (#n for an attempt
after the first) and stream (stdout or stderr). With FORMULA/gate, what the
formula's health gate checks printed (each check as an attempt, its output
lines, then its result: "fail: exit 2"), which a whole workflow's, a
formula's and a host's lines include too. With --host HOST (or HOST
in place of FORMULA, when no formula has that name), the lines of every
node on that host (its name as the composition gives it: 10.0.0.5,
web-1.example.com); --host with FORMULA or FORMULA/NODE prints only what
of them ran there. Control characters are shown escaped (\x1b; \u009b for
a C1 control, \xff for a byte that is not UTF-8): a host's output cannot
drive the terminal (-o json has them as JSON escapes). It prints what the
log stream holds (lines are kept for 24 hours) and exits; with -f it then
follows new lines until the workflow ends, or Ctrl-C (exit 130). -o json
prints each line's LogLine (the payload of its gantry.log.line event) as
one JSON object per line; -o yaml as a YAML document each. WORKFLOW_ID may
be any unique start of an id, as for watch. A workflow no one submitted,
or a formula, node or host the workflow does not have, is an error.`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: cf.completeLogsArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := ""
			if len(args) == 2 {
				arg = args[1]
			}
			sel, err := parseNodeSel(arg, host)
			if err != nil {
				return &exitError{code: ExitUsage, err: err}
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
			doc, _ := cl.Status(cmd.Context(), id) // nil: not projected yet
			if sel, err = sel.check(cmd.ErrOrStderr(), id, doc, follow); err != nil {
				return err
			}
			since, gen := watchStart(cmd.Context(), cl, id)
			return printLogs(cmd, cl, logsQuery{id: id, sel: sel, doc: doc, since: since, gen: gen, follow: follow, format: output})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow new lines until the workflow ends")
	cmd.Flags().StringVar(&host, "host", "", "only the lines of nodes on this host, by its name (10.0.0.5, web-1.example.com)")
	_ = cmd.RegisterFlagCompletionFunc("host", cf.completeWorkflowHosts)
	outputFlag(cmd, &output, "text", formatJSON)
	return cmd
}

// nodeSel is what gantry logs prints the lines of: a formula's nodes, one
// node (formula and node), a host's nodes, or every node (all empty).
// name is an argument that may be a formula or a host (a token): check
// resolves it against the workflow, a formula first.
type nodeSel struct{ formula, node, host, name string }

// parseNodeSel reads the FORMULA, FORMULA/NODE or HOST argument (arg, ""
// for none) and --host.
func parseNodeSel(arg, host string) (nodeSel, error) {
	var s nodeSel
	if host != "" {
		if !dag.IsHostName(host) {
			return s, fmt.Errorf("--host %q is not a host name (as gantry status lists them)", host)
		}
		s.host = host
	}
	f, n, isNode := strings.Cut(arg, "/")
	switch {
	case arg == "":
	case isNode && dag.IsToken(f) && dag.IsToken(n):
		s.formula, s.node = f, n
	case !isNode && dag.IsToken(arg):
		s.name = arg
	case !isNode && dag.IsHostName(arg) && host == "":
		s.host = arg
	case !isNode && dag.IsHostName(arg):
		return nodeSel{}, fmt.Errorf("host %s and --host %s: give the host once", arg, host)
	default:
		return nodeSel{}, fmt.Errorf("%q is not FORMULA, FORMULA/NODE or a host name (as gantry status lists them)", arg)
	}
	return s, nil
}

func (s nodeSel) all() bool { return s == nodeSel{} }

func (s nodeSel) match(ll *events.LogLine) bool {
	switch {
	case s.host != "" && ll.Host != s.host,
		s.formula != "" && ll.Formula != s.formula,
		s.node != "" && ll.Node != s.node,
		s.name != "" && ll.Formula != s.name && ll.Host != s.name:
		return false
	}
	return true
}

// check says whether the workflow has what s names, and resolves a name
// to the formula or the host it is. Its document lists the formulas and
// nodes that have started (or were blocked or cancelled): one it does not
// list is an error once the workflow has ended; while it runs, logs -f
// waits for it to start, logs without -f says it has not.
func (s nodeSel) check(stderr io.Writer, id string, doc *events.WorkflowDoc, follow bool) (nodeSel, error) {
	if s.all() || doc == nil {
		return s, nil
	}
	if s.name != "" {
		switch {
		case doc.Formulas[s.name] != nil:
			s.formula, s.name = s.name, ""
		case slices.Contains(hostNames(doc), s.name) && s.host == "":
			s.host, s.name = s.name, ""
		default:
			what := fmt.Sprintf("formula or host %s", s.name)
			return s, notStarted(stderr, id, doc, follow, what, "formulas", formulaNames(doc))
		}
	}
	if s.formula != "" {
		f := doc.Formulas[s.formula]
		switch {
		case s.node == "" && f == nil:
			return s, notStarted(stderr, id, doc, follow, "formula "+s.formula, "formulas", formulaNames(doc))
		case s.node != "" && (f == nil || (f.Nodes[s.node] == nil && s.node != GateNode)):
			return s, notStarted(stderr, id, doc, follow, "node "+s.formula+"/"+s.node, "nodes", nodeNames(doc))
		}
	}
	if s.host != "" {
		return s, s.checkHost(stderr, id, doc, follow)
	}
	return s, nil
}

// notStarted is the error (or, following, the note) of a formula or node
// (what) the workflow's document does not list; known are those it lists.
func notStarted(stderr io.Writer, id string, doc *events.WorkflowDoc, follow bool, what, kind string, known []string) error {
	list := strings.Join(known[:min(len(known), 20)], ", ")
	if len(known) > 20 {
		list += fmt.Sprintf(" and %d more", len(known)-20)
	}
	if doc.Status.Terminal() {
		return failed("workflow %s has no %s (its %s: %s)", id, what, kind, list)
	}
	if !follow {
		return failed("workflow %s has no %s that has started (so far: %s); logs -f waits for it", id, what, list)
	}
	linef(stderr, "gantry: %s of workflow %s has not started yet; waiting for it", what, id)
	return nil
}

// checkHost says whether the workflow runs anything on the host, as check
// does for a node.
func (s nodeSel) checkHost(stderr io.Writer, id string, doc *events.WorkflowDoc, follow bool) error {
	known := hostNames(doc)
	if slices.Contains(known, s.host) {
		return nil
	}
	list := strings.Join(known, ", ")
	switch {
	case doc.Status.Terminal():
		return failed("workflow %s ran nothing on host %s (its hosts: %s)", id, s.host, list)
	case !follow:
		return failed("workflow %s has started nothing on host %s (so far: %s); logs -f waits for it", id, s.host, list)
	}
	linef(stderr, "gantry: workflow %s has started nothing on host %s yet; waiting for it", id, s.host)
	return nil
}

// logsQuery is what gantry logs reads.
type logsQuery struct {
	id     string
	sel    nodeSel
	doc    *events.WorkflowDoc // nil: not projected yet
	since  time.Time
	gen    int
	follow bool
	format string // "text", json or yaml
}

// subjects are the log subjects to read: the host's, the node's or the
// formula's on its host, the workflow's hosts' when they are all known,
// else every host's.
func (q logsQuery) subjects() []string {
	node := cmp.Or(q.sel.node, "*")
	if q.sel.host != "" {
		return []string{events.HostLogs(q.sel.host, node)}
	}
	if q.doc == nil || q.sel.name != "" {
		return []string{events.AllLogs}
	}
	if q.sel.formula != "" {
		if f, ok := q.doc.Formulas[q.sel.formula]; ok && f.Host != "" {
			return []string{events.HostLogs(f.Host, node)}
		}
		if q.sel.node == "" {
			return []string{events.AllLogs}
		}
		return []string{events.HostLogs("*", node)}
	}
	if !q.doc.Status.Terminal() { // formulas not yet started have no host here
		return []string{events.AllLogs}
	}
	var subs []string
	for _, f := range q.doc.Formulas {
		if s := events.HostLogs(f.Host, "*"); f.Host != "" && !slices.Contains(subs, s) {
			subs = append(subs, s)
		}
	}
	if len(subs) == 0 || len(subs) > 100 {
		return []string{events.AllLogs}
	}
	sort.Strings(subs)
	return subs
}

// logsPoll is how long logs waits for a line before it looks whether it
// is done.
const logsPoll = 250 * time.Millisecond

// printLogs reads the log stream from q.since and prints the workflow's
// lines until it has read all there are, and with q.follow, until the
// workflow (run generation q.gen or later) has ended too.
func printLogs(cmd *cobra.Command, cl *client.Client, q logsQuery) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	feed, err := cl.Follow(ctx, client.FollowOptions{Stream: events.StreamLogs, Subjects: q.subjects(), Since: q.since})
	if err != nil {
		return &exitError{code: ExitProblem, err: fmt.Errorf("logs: %w", err)}
	}
	defer feed.Stop()
	gates, err := openGateFeed(ctx, cl, q)
	if err != nil {
		return &exitError{code: ExitProblem, err: fmt.Errorf("logs: health gates: %w", err)}
	}
	out := cmd.OutOrStdout()
	// done prints the gates' lines not printed yet: logs has read all
	// there is.
	done := func() error {
		if err := gates.fetch(ctx); err != nil {
			return &exitError{code: ExitProblem, err: fmt.Errorf("logs: health gates: %w", err)}
		}
		return gates.print(out, time.Time{}, q.format)
	}
	ended := make(chan struct{})
	if q.follow {
		if err := awaitEnd(ctx, cl, q, ended); err != nil {
			return &exitError{code: ExitProblem, err: fmt.Errorf("logs: %w", err)}
		}
	} else {
		close(ended)
		if feed.Pending() == 0 {
			return done() // no node's line at all
		}
	}
	isEnded := func() bool {
		select {
		case <-ended:
			return true
		default:
			return false
		}
	}
	for {
		if q.follow && gates.due() {
			if err := gates.fetch(ctx); err != nil {
				return &exitError{code: ExitProblem, err: fmt.Errorf("logs: health gates: %w", err)}
			}
		}
		m, err := feed.NextWithin(logsPoll)
		switch {
		case ctx.Err() != nil:
			return &exitError{code: ExitInterrupted, err: errors.New("logs interrupted")}
		case errors.Is(err, nats.ErrTimeout):
			if isEnded() && feed.CaughtUp(ctx) {
				return done()
			}
			if err := gates.print(out, time.Now(), q.format); err != nil {
				return err
			}
			continue
		case err != nil:
			return &exitError{code: ExitProblem, err: fmt.Errorf("logs: %w", err)}
		}
		var ll events.LogLine
		if env := m.Envelope; events.DecodeData(env, &ll) == nil && ll.WorkflowID == q.id && q.sel.match(&ll) {
			if err := gates.print(out, env.Time, q.format); err != nil { // the gates' lines before it
				return err
			}
			if err := printLogLine(out, env, &ll, q.format); err != nil {
				return err
			}
		}
		if m.Pending == 0 && isEnded() {
			return done()
		}
	}
}

// awaitEnd closes ended once the workflow's run generation q.gen (or a
// later one) has ended, read from the event stream.
func awaitEnd(ctx context.Context, cl *client.Client, q logsQuery, ended chan struct{}) error {
	feed, err := cl.Follow(ctx, client.FollowOptions{Stream: events.StreamEvents, Subjects: []string{events.WorkflowLifecycle(q.id)}, Since: q.since})
	if err != nil {
		return err
	}
	go func() {
		defer feed.Stop()
		for m, err := range feed.Messages() {
			if err != nil {
				return
			}
			var e events.WorkflowEvent
			if events.DecodeData(m.Envelope, &e) == nil && e.Status.Terminal() && e.Generation >= q.gen {
				close(ended)
				return
			}
		}
	}()
	return nil
}

// printLogLine prints a line: "15:04:05.000 HOST FORMULA/NODE STREAM line"
// or its LogLine as JSON.
func printLogLine(w io.Writer, env *events.Envelope, ll *events.LogLine, format string) error {
	if structured(format) {
		b, err := json.Marshal(ll)
		if err != nil {
			return err
		}
		return printRecord(w, format, b)
	}
	name := ll.Formula + "/" + ll.Node
	if ll.Attempt > 1 {
		name += fmt.Sprintf("#%d", ll.Attempt)
	}
	// A host's output line, and its name, with control characters (escape
	// sequences that would move the cursor, set the title or the
	// clipboard) shown escaped (\x1b), tabs kept.
	_, err := fmt.Fprintln(w, termsafe.Line(fmt.Sprintf("%s %-12s %-28s %-6s %s", env.Time.Local().Format("15:04:05.000"), ll.Ref.Host, name, ll.Stream, ll.Line)))
	return err
}
