package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/hostdrift"
	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

func newDriftCmd() *cobra.Command {
	var cf connFlags
	var vf *varFlags
	var o driftOptions
	cmd := &cobra.Command{
		Use:   "drift FILE",
		Short: "Ask the hosts whether they are as the composition wants",
		Long: `drift asks the composition's hosts whether each node is as the composition
wants: it runs the nodes' check commands on their hosts, as a workflow of
operation check of its own (an operator's right: it runs commands on the
hosts), and reports each node:

  ok           its check passed (exit 0)
  changed      its check failed (exit not 0): a run would change something
  missing      a file it manages is not on the host
  unreachable  its host could not be reached or trusted, or did not answer
               within --timeout
  unknown      nothing can tell: the node has no check (and no files), or
               its check could not run
  orphaned     the records have it in place, but the composition no longer
               has it (no host is asked)

Beside each, RECORDS is what gantry drift --records says of it. The check
run asks every formula at once (no depends_on, health gates or rollout
batches between them), one attempt per node, within the executors' usual
limits; --timeout bounds it (default 5m). On a terminal, or with
--progress, it prints "drift: 120/500 hosts" on stderr as hosts answer.
It exits 0 when nothing was found changed (ok and unknown nodes), 4 when
anything is changed, missing or orphaned, and 1 when hosts were unreachable
and nothing was found changed.

--records compares the composition with what its own earlier runs left in
the records instead, and asks no host (a viewer may): each node is ok (a
create of this composition put it in place with the same spec), changed
(in place with another spec hash), or missing (never created, deleted, or
its last run did not complete; a check run does not count), and each node
the composition put in place on its hosts but no longer has is orphaned.
Other compositions' nodes on the same hosts are theirs, and are not
reported. It exits 0 when everything is ok and 4 when anything drifted;
its --timeout is how long to wait for the state-store's reply (default 30s).
Give the --var and --var-file the composition was submitted with: a var a
command uses changes its spec.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := vf.readForSubmit(cmd.ErrOrStderr(), args[0])
			if err != nil {
				return err
			}
			if o.records {
				if o.timeout > 0 {
					cf.timeout = o.timeout
				}
				return recordsDrift(cmd, cf, args[0], data, o.output)
			}
			return hostDrift(cmd, cf, args[0], data, o)
		},
	}
	cf.addConn(cmd)
	vf = addVarFlags(cmd)
	f := cmd.Flags()
	f.BoolVar(&o.records, "records", false, "compare with the records only; ask no host")
	f.DurationVar(&o.timeout, "timeout", 0, "how long the hosts have to answer (default 5m); with --records, how long to wait for the reply (default 30s)")
	f.BoolVar(&o.progress, "progress", false, "print how many hosts have answered on stderr, also when it is not a terminal")
	outputFlag(cmd, &o.output, "table", "json")
	return cmd
}

// driftOptions are gantry drift's flags.
type driftOptions struct {
	records, progress bool
	timeout           time.Duration
	output            string
}

// hostDrift asks the hosts (see askHosts) and prints their answers.
func hostDrift(cmd *cobra.Command, cf connFlags, path string, data []byte, o driftOptions) error {
	if o.timeout < 0 {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--timeout %s: give a duration above 0", o.timeout)}
	}
	run, err := prepareHostDrift(cmd.ErrOrStderr(), path, data, cmp.Or(o.timeout, defaultHostDriftTimeout))
	if err != nil {
		return err
	}
	run.progress = o.progress
	cl, err := cf.connectOperator()
	if err != nil {
		return err
	}
	defer cl.Close()
	rep, err := askHosts(cmd.Context(), cmd.ErrOrStderr(), cl, run)
	if err != nil {
		return err
	}
	if o.output == "json" {
		if err := printJSON(cmd.OutOrStdout(), rep); err != nil {
			return err
		}
	} else {
		printHostDrift(cmd.OutOrStdout(), rep)
	}
	return hostDriftExit(rep)
}

// recordsDrift is gantry drift --records: the composition is rendered
// here, and the state-store compares the nodes it wants with the records.
func recordsDrift(cmd *cobra.Command, cf connFlags, path string, data []byte, output string) error {
	p, err := driftPlan(cmd.ErrOrStderr(), path, data)
	if err != nil {
		return err
	}
	cl, err := cf.connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	rep, err := cl.Drift(cmd.Context(), p)
	if err != nil {
		return stateErr(err)
	}
	if output == "json" {
		if err := printJSON(cmd.OutOrStdout(), rep); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "HOST\tFORMULA\tNODE\tDRIFT\tRECORDED\tWORKFLOW")
		for _, it := range rep.Items {
			row(tw, it.Host, it.Formula, it.Node, it.Drift, it.HaveStatus, it.WorkflowID)
		}
		tw.Flush()
		fmt.Fprintf(cmd.OutOrStdout(), "%s: %d ok, %d changed, %d missing, %d orphaned\n", termsafe.Line(rep.Workflow),
			rep.Counts[events.DriftOK], rep.Counts[events.DriftChanged], rep.Counts[events.DriftMissing], rep.Counts[events.DriftOrphaned])
	}
	if len(rep.Items) != rep.Counts[events.DriftOK] {
		return &exitError{code: ExitChanges, err: errors.New("the records differ from the composition")} // as a drift that asked the hosts
	}
	return nil
}

// How gantry drift asks the hosts.
const (
	// defaultHostDriftTimeout bounds a host drift when --timeout is not
	// given: past it, the nodes whose host has not answered are
	// unreachable.
	defaultHostDriftTimeout = 5 * time.Minute
	// hostDriftGrace is how much longer than the drift's timeout its
	// check run may last: the planner stops what still runs on the hosts
	// then, even when gantry is gone.
	hostDriftGrace = 30 * time.Second
	// progressInterval is how often the progress line is printed.
	progressInterval = time.Second
)

// hostDriftRun is a composition ready for a host drift: what it wants on
// each host, and its check run's document.
type hostDriftRun struct {
	path     string
	plan     *dag.Plan // the composition's plan (state.drift compares its nodes with the records)
	name     string
	check    []byte // the check run's document (hostdrift.CheckRun)
	nodes    []driftNode
	hosts    int
	timeout  time.Duration
	progress bool
}

// driftNode is a node of the plan and what can tell its state.
type driftNode struct {
	key  hostdrift.Key
	tell hostdrift.Node
}

// driftPlan loads the composition as the planner will (its problems
// printed here, exit 1): a drift renders its templates on this side,
// never in the state-store.
func driftPlan(stderr io.Writer, path string, data []byte) (*dag.Plan, error) {
	tree, err := composition.Parse(path, data)
	if err != nil {
		return nil, invalidComposition(stderr, path, err)
	}
	c, err := dag.Load(tree)
	if err != nil {
		return nil, invalidComposition(stderr, path, err)
	}
	return dag.PlanLoaded(c), nil
}

// prepareHostDrift loads the composition (driftPlan) and builds its check
// run.
func prepareHostDrift(stderr io.Writer, path string, data []byte, timeout time.Duration) (*hostDriftRun, error) {
	p, err := driftPlan(stderr, path, data)
	if err != nil {
		return nil, err
	}
	run := &hostDriftRun{path: path, plan: p, name: p.Workflow, timeout: timeout}
	hosts := map[string]bool{}
	var selected []string
	for i := range p.Formulas {
		pf := &p.Formulas[i]
		hosts[pf.Server] = true
		selected = append(selected, pf.ID)
		for j := range pf.Nodes {
			pn := &pf.Nodes[j]
			run.nodes = append(run.nodes, driftNode{key: hostdrift.Key{Host: pf.Server, Formula: pf.ID, Node: pn.Name},
				tell: hostdrift.Node{HasCheck: strings.TrimSpace(pn.Check) != "", HasFiles: len(p.Spec(i).Nodes[j].Files) > 0}})
		}
	}
	run.hosts = len(hosts)
	if len(p.Targets) == 0 {
		selected = nil
	}
	checkTree, err := composition.Parse(path, data) // a tree of its own: Load may have used the first
	if err == nil {
		err = hostdrift.CheckRun(checkTree, selected, timeout+hostDriftGrace)
	}
	if err == nil {
		run.check, err = checkTree.MarshalJSON()
	}
	if err != nil {
		return nil, failed("%s: %w", path, err)
	}
	return run, nil
}

// invalidComposition prints a composition's problems, one a line, and is
// exit 1 (exit 3 for what is not a problem of the composition).
func invalidComposition(stderr io.Writer, path string, err error) error {
	var inv *dag.InvalidError
	if errors.As(err, &inv) {
		for _, m := range inv.Messages() {
			linef(stderr, "%s: %s", path, m)
		}
		return failed("%s is not a valid composition", path)
	}
	return &exitError{code: ExitProblem, err: err}
}

// askHosts runs the composition's checks on its hosts and reports each
// node's state there beside what the records say. The records are read
// first (state.drift), then the check run is submitted (only an operator
// may: it runs commands on the hosts) and followed until it ends or the
// timeout passes; a run still going then is cancelled.
func askHosts(ctx context.Context, stderr io.Writer, cl *client.Client, run *hostDriftRun) (*hostdrift.Report, error) {
	rec, err := cl.Drift(ctx, run.plan)
	if err != nil {
		return nil, operatorOnly(stateErr(err))
	}
	since := time.Now().Add(-time.Second)
	reply, err := sendComposition(ctx, stderr, cl, sent{file: run.path, what: run.path + " (its checks, for drift)", data: run.check})
	if err != nil {
		return nil, operatorOnly(err)
	}
	linef(stderr, "gantry: asking %d host(s) about %d node(s): workflow %s (operation check); gantry status %s", run.hosts, len(run.nodes), reply.WorkflowID, reply.WorkflowID)
	f := newDriftFollow(run, stderr)
	if err := f.follow(ctx, cl, reply.WorkflowID, since); err != nil {
		return nil, err
	}
	if !f.ended {
		linef(stderr, "gantry: %d node(s) had not answered within %s: cancelling workflow %s", len(run.nodes)-len(f.outcomes), run.timeout, reply.WorkflowID)
		_, _ = cl.Control(context.Background(), reply.WorkflowID, events.VerbCancel, nil) // best effort: its own timeout stops it too
	}
	rep := hostdrift.Merge(run.name, reply.WorkflowID, f.items(), &rec)
	return &rep, nil
}

// operatorOnly adds to a refusal by the NATS server why: asking the hosts
// runs commands on them (an operator's connection, its replies to the
// operator's inbox prefix).
func operatorOnly(err error) error {
	var ee *exitError
	if errors.As(err, &ee) && ee.code == ExitProblem && strings.Contains(ee.err.Error(), "not allowed for this identity") {
		return &exitError{code: ExitProblem, err: fmt.Errorf("%w\ndrift asks the hosts by running the composition's checks on them, which only an operator may do; gantry drift --records compares the records alone", ee.err)}
	}
	return err
}

// driftFollow follows a check run: each node's end, the run's end.
type driftFollow struct {
	run      *hostDriftRun
	stderr   io.Writer
	outcomes map[hostdrift.Key]*hostdrift.Outcome
	byHost   map[string]int // nodes of each host still to end
	hostsIn  int            // hosts whose nodes have all ended
	ended    bool
	seen     map[string]bool
	shown    int // hostsIn when progress was printed last
	progress bool
}

func newDriftFollow(run *hostDriftRun, stderr io.Writer) *driftFollow {
	f := &driftFollow{run: run, stderr: stderr, outcomes: map[hostdrift.Key]*hostdrift.Outcome{}, byHost: map[string]int{},
		seen: map[string]bool{}, shown: -1, progress: run.progress || isTerminal(stderr)}
	for _, n := range run.nodes {
		f.byHost[n.key.Host]++
	}
	return f
}

// follow reads the run's events until it ends or the timeout passes.
func (f *driftFollow) follow(ctx context.Context, cl *client.Client, id string, since time.Time) error {
	feedCtx, stop := context.WithCancel(ctx)
	defer stop()
	feed, err := openEventFeed(feedCtx, cl, id, since, f.stderr)
	if err != nil {
		return err
	}
	evs, errs := pumpEvents(feedCtx, feed)
	deadline := time.NewTimer(f.run.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	for !f.ended {
		select {
		case env := <-evs:
			f.take(env)
		case err := <-errs:
			return err
		case <-tick.C:
			f.showProgress()
		case <-deadline.C:
			f.showProgress()
			return nil
		case <-ctx.Done():
			return &exitError{code: ExitInterrupted, err: ctx.Err()}
		}
	}
	f.showProgress()
	return nil
}

// take takes an event of the run in.
func (f *driftFollow) take(env *events.Envelope) {
	if f.seen[env.SeenKey()] {
		return
	}
	f.seen[env.SeenKey()] = true
	pl, _ := env.Payload() // nil, and left out, when it does not decode
	switch e := pl.(type) {
	case *events.NodeEvent:
		f.node(e)
	case *events.WorkflowEvent:
		if e.Status.Terminal() {
			f.ended = true
		}
	}
}

// node takes a node's end in: its first final outcome counts.
func (f *driftFollow) node(e *events.NodeEvent) {
	if !e.Status.Terminal() || e.WillRetry {
		return
	}
	k := hostdrift.Key{Host: e.Host, Formula: e.Formula, Node: e.Node}
	if _, done := f.outcomes[k]; done {
		return
	}
	f.outcomes[k] = outcomeOf(e)
	if n, ok := f.byHost[k.Host]; ok {
		f.byHost[k.Host] = n - 1
		if n == 1 {
			f.hostsIn++
		}
	}
}

// outcomeOf is what a node event of the check run says. Where a node
// manages files, their per-file check results are mapped into
// Outcome.Files here.
func outcomeOf(e *events.NodeEvent) *hostdrift.Outcome {
	o := &hostdrift.Outcome{Status: e.Status, Check: e.Check, Unreachable: e.Unreachable, ExitCode: e.ExitCode,
		Error: e.Error, Reason: e.Reason, Blocker: e.Blocker}
	for _, f := range e.Files {
		st := hostdrift.OK
		if f.Status == events.FileChanged {
			st = hostdrift.Changed
			if slices.Contains(f.Differs, "missing") {
				st = hostdrift.Missing
			}
		}
		o.Files = append(o.Files, hostdrift.File{Path: f.Path, State: st, Diff: f.Diff})
	}
	return o
}

// showProgress prints "drift: 120/500 hosts" on stderr when more hosts
// have answered, on a terminal or with --progress.
func (f *driftFollow) showProgress() {
	if !f.progress || f.hostsIn == f.shown {
		return
	}
	f.shown = f.hostsIn
	fmt.Fprintf(f.stderr, "drift: %d/%d hosts\n", f.hostsIn, f.run.hosts)
}

// items classifies each node of the plan by its outcome.
func (f *driftFollow) items() []hostdrift.Item {
	out := make([]hostdrift.Item, 0, len(f.run.nodes))
	for _, n := range f.run.nodes {
		o := f.outcomes[n.key]
		var blocker *hostdrift.Outcome
		if o != nil && o.Status == dag.NodeBlocked && o.Blocker != "" {
			blocker = f.outcomes[hostdrift.Key{Host: n.key.Host, Formula: n.key.Formula, Node: o.Blocker}]
		}
		st, why := hostdrift.Classify(n.tell, o, blocker, f.run.timeout)
		it := hostdrift.Item{Host: n.key.Host, Formula: n.key.Formula, Node: n.key.Node, Drift: st, Reason: why}
		if o != nil {
			it.Files = o.Files
		}
		out = append(out, it)
	}
	return out
}

// printHostDrift prints the report as a table and a summary line.
func printHostDrift(w io.Writer, rep *hostdrift.Report) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tFORMULA\tNODE\tDRIFT\tRECORDS\tWHY")
	for _, it := range rep.Items {
		row(tw, it.Host, it.Formula, it.Node, it.Drift, it.Records, it.Reason)
		for _, f := range it.Files {
			row(tw, "", "", "  "+f.Path, f.State, "", "")
		}
	}
	tw.Flush()
	counts := make([]string, 0, len(hostdrift.States))
	for _, s := range hostdrift.States {
		counts = append(counts, fmt.Sprintf("%d %s", rep.Counts[s], s))
	}
	linef(w, "%s on its hosts: %s (check run %s)", rep.Workflow, strings.Join(counts, ", "), rep.CheckWorkflowID)
}

// hostDriftExit is gantry drift's exit: 4 when a host reports a change
// (changed, missing, or orphaned), else 1 when a host could not be asked
// (unreachable), else 0. Unknown nodes alone are 0: nothing found them
// changed.
func hostDriftExit(rep *hostdrift.Report) error {
	changes, unreachable := rep.Found()
	switch {
	case changes:
		return &exitError{code: ExitChanges, err: errors.New("the hosts differ from the composition")}
	case unreachable:
		return failed("%d node(s) could not be asked: their hosts are unreachable", rep.Counts[hostdrift.Unreachable])
	}
	return nil
}
