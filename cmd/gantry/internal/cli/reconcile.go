package cli

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/hostdrift"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

func newReconcileCmd() *cobra.Command {
	var cf connFlags
	var vf *varFlags
	var watch, dryRun, records, progress bool
	var driftTimeout time.Duration
	var output string
	cmd := &cobra.Command{
		Use:   "reconcile FILE",
		Short: "Run only what the hosts report changed or missing",
		Long: `reconcile asks the hosts for the composition's drift (as gantry drift does:
the nodes' checks run on their hosts) and submits the composition limited
to the formulas holding the nodes to run:

  - changed or missing on the host: they run (named in rerun when the
    records have them in place with the same spec, so they are not skipped
    as already done; their check still runs first);
  - unknown (no check, no files): they run when the records do not have
    them in place with the same spec (missing or changed there), and are
    left alone otherwise;
  - ok: skipped; unreachable: left alone, and listed.

In the targeted formulas, and in their prerequisites, every other node in
place with the same spec is skipped as already done (the prerequisites'
health gates are checked again). Orphaned nodes (in place, but no longer
in the composition) are listed and left alone: a delete removes them. When
nothing is to run it says "nothing to reconcile" and submits nothing (exit
1 when hosts were unreachable). --drift-timeout bounds the hosts' answers
(default 5m). --records decides from the records alone, asking no host
(changed and missing there run), as gantry drift --records does. With
--dry-run it prints what it would run and submits nothing but drift's check
run (nothing at all with --records); with --watch it
streams the run as gantry submit --watch does. The composition must not
set targets, rerun or reset: reconcile chooses what runs. Give the --var
and --var-file it was submitted with (gantry status shows them): drift and
the run both use them. -o json (or yaml) prints {"workflow", "drifted",
"targets", "rerun", "unreachable", "formulas", "dry_run", "workflow_id",
"trace_id"} instead of the text.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			data, err := vf.readForSubmit(cmd.ErrOrStderr(), path)
			if err != nil {
				return err
			}
			tree, err := reconcilable(cmd, path, data)
			if err != nil {
				return err
			}
			if driftTimeout < 0 {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--drift-timeout %s: give a duration above 0", driftTimeout)}
			}
			var run *hostDriftRun
			if !records {
				if run, err = prepareHostDrift(cmd.ErrOrStderr(), path, data, cmp.Or(driftTimeout, defaultHostDriftTimeout)); err != nil {
					return err
				}
				run.progress = progress
			}
			connect := cf.connectOperator // it submits
			if dryRun && records {
				connect = cf.connect
			}
			cl, err := connect()
			if err != nil {
				return err
			}
			defer cl.Close()
			out := cmd.OutOrStdout()
			text := out
			if structured(output) {
				text = io.Discard // the result is printed whole at the end
			}
			var pick reconcilePick
			if records {
				p, err := driftPlan(cmd.ErrOrStderr(), path, data)
				if err != nil {
					return err
				}
				rep, err := cl.Drift(cmd.Context(), p)
				if err != nil {
					return stateErr(err)
				}
				pick.drifted, pick.targets = printDrift(text, &rep)
			} else {
				rep, err := askHosts(cmd.Context(), cmd.ErrOrStderr(), cl, run)
				if err != nil {
					return err
				}
				pick = printHostReconcile(text, rep)
			}
			res := pick.result(dryRun)
			if len(pick.drifted) == 0 {
				if err := res.print(out, output, "nothing to reconcile"); err != nil {
					return err
				}
				if pick.unreachable > 0 {
					return failed("%d node(s) could not be asked: their hosts are unreachable", pick.unreachable)
				}
				return nil
			}
			tree.Set("targets", dag.Strings(pick.targets))
			if len(pick.rerun) > 0 {
				tree.Set("rerun", dag.Strings(pick.rerun))
			}
			body, err := tree.MarshalJSON()
			if err != nil {
				return failed("%s: %w", path, err)
			}
			if dryRun {
				return printDryRun(out, path, body, res, output)
			}
			return submitReconcile(cmd, cl, reconcileSubmit{path: path, body: body, res: res, output: output, watch: watch})
		},
	}
	cf.add(cmd)
	vf = addVarFlags(cmd)
	f := cmd.Flags()
	f.BoolVarP(&watch, "watch", "w", false, "stream the run until it ends")
	f.BoolVar(&dryRun, "dry-run", false, "print what would run; submit nothing")
	f.BoolVar(&records, "records", false, "decide from the records alone; ask no host")
	f.DurationVar(&driftTimeout, "drift-timeout", 0, "how long the hosts have to answer (default 5m)")
	f.BoolVar(&progress, "progress", false, "print how many hosts have answered on stderr, also when it is not a terminal")
	outputFlag(cmd, &output, "text", formatJSON)
	return cmd
}

// reconcilePick is what a reconcile runs: the nodes ("formula/node
// (why)"), the formulas holding them (targets), those to name in rerun,
// and how many nodes it could not ask.
type reconcilePick struct {
	drifted, targets, rerun []string
	unreachable             int
}

// reconcileResult is what reconcile found and did, as -o json prints it.
type reconcileResult struct {
	Drifted     []string `json:"drifted"` // "formula/node (state on host)": what runs
	Targets     []string `json:"targets"` // the formulas holding them
	Rerun       []string `json:"rerun"`   // of them, those in place in the records
	Unreachable int      `json:"unreachable"`
	Formulas    []string `json:"formulas,omitempty"`
	DryRun      bool     `json:"dry_run"`
	WorkflowID  string   `json:"workflow_id,omitempty"`
	TraceID     string   `json:"trace_id,omitempty"`
}

// result is the pick as -o json prints it (empty lists, not null).
func (p reconcilePick) result(dryRun bool) *reconcileResult {
	return &reconcileResult{Drifted: append([]string{}, p.drifted...), Targets: append([]string{}, p.targets...),
		Rerun: append([]string{}, p.rerun...), Unreachable: p.unreachable, DryRun: dryRun}
}

// print prints the result as JSON or YAML, or the line text.
func (r *reconcileResult) print(w io.Writer, format, text string) error {
	if structured(format) {
		return printAs(w, format, r)
	}
	fmt.Fprintln(w, text)
	return nil
}

// printHostReconcile prints what the hosts reported and picks what runs
// (hostdrift.Item.Reconcile), in report order.
func printHostReconcile(out io.Writer, rep *hostdrift.Report) reconcilePick {
	counts := make([]string, 0, len(hostdrift.States))
	for _, s := range hostdrift.States {
		counts = append(counts, fmt.Sprintf("%d %s", rep.Counts[s], s))
	}
	linef(out, "drift of %s on its hosts: %s", rep.Workflow, strings.Join(counts, ", "))
	var pick reconcilePick
	var orphaned []string
	for _, it := range rep.Items {
		run, rerun := it.Reconcile()
		switch {
		case run:
			linef(out, "  %-11s %s %s/%s: %s (records: %s)", it.Drift, it.Host, it.Formula, it.Node, it.Reason, it.Records)
			pick.drifted = append(pick.drifted, fmt.Sprintf("%s/%s (%s on %s)", it.Formula, it.Node, it.Drift, it.Host))
			if !slices.Contains(pick.targets, it.Formula) {
				pick.targets = append(pick.targets, it.Formula)
			}
			if rerun {
				pick.rerun = append(pick.rerun, it.Formula+"/"+it.Node)
			}
		case it.Drift == hostdrift.Unreachable:
			pick.unreachable++
			linef(out, "  %-11s %s %s/%s: %s (left alone)", it.Drift, it.Host, it.Formula, it.Node, it.Reason)
		case it.Drift == hostdrift.Orphaned:
			orphaned = append(orphaned, fmt.Sprintf("%s %s/%s", it.Host, it.Formula, it.Node))
		}
	}
	for _, o := range orphaned {
		linef(out, "  orphaned    %s", o)
	}
	if len(orphaned) > 0 {
		fmt.Fprintf(out, "orphaned: not in the composition any more; run a delete to remove them (%d left as they are)\n", len(orphaned))
	}
	return pick
}

// reconcilable parses the composition and refuses one that chooses what
// runs itself (targets, reset) or is not a create.
func reconcilable(cmd *cobra.Command, path string, data []byte) (*dag.Value, error) {
	invalid := func(err error) error {
		var inv *dag.InvalidError
		if errors.As(err, &inv) {
			for _, m := range inv.Messages() {
				linef(cmd.ErrOrStderr(), "%s: %s", path, m)
			}
			return failed("%s is not a valid composition", path)
		}
		return &exitError{code: ExitProblem, err: err}
	}
	tree, err := composition.Parse(path, data)
	if err != nil {
		return nil, invalid(err)
	}
	if tree.Kind == dag.KindMap {
		if t := tree.Get("targets"); t != nil && t.Kind != dag.KindNull {
			return nil, failed("%s: targets: reconcile chooses the targets itself (the nodes drift reports missing or changed); remove them", path)
		}
		if r := tree.Get("rerun"); r != nil && r.Kind != dag.KindNull {
			return nil, failed("%s: rerun: reconcile chooses what runs again itself (the nodes the hosts report changed or missing); remove it", path)
		}
		if r := tree.Get("reset"); r != nil && r.Kind == dag.KindBool && r.Scalar == "true" {
			return nil, failed("%s: reset: reconcile runs only what drifted, and reset would run again what is in place; remove it", path)
		}
		if op := tree.Get("operation"); op != nil && op.Kind == dag.KindString && op.Scalar != string(dag.OpCreate) {
			return nil, failed("%s: operation: reconcile runs a create, not %s", path, op.Scalar)
		}
	}
	if _, err := dag.Load(tree); err != nil {
		return nil, invalid(err)
	}
	return tree, nil
}

// printDrift prints the drift summary and what is out of place, and
// returns the missing and changed nodes ("formula/node (drift)") and the
// formulas that hold them, in report order.
func printDrift(out io.Writer, rep *events.DriftReport) (drifted, targets []string) {
	linef(out, "drift of %s: %d ok, %d changed, %d missing, %d orphaned", rep.Workflow,
		rep.Counts[events.DriftOK], rep.Counts[events.DriftChanged], rep.Counts[events.DriftMissing], rep.Counts[events.DriftOrphaned])
	var orphaned []string
	for _, it := range rep.Items {
		switch it.Drift {
		case events.DriftMissing, events.DriftChanged:
			linef(out, "  %-8s %s %s/%s", it.Drift, it.Host, it.Formula, it.Node)
			drifted = append(drifted, fmt.Sprintf("%s/%s (%s on %s)", it.Formula, it.Node, it.Drift, it.Host))
			if !slices.Contains(targets, it.Formula) {
				targets = append(targets, it.Formula)
			}
		case events.DriftOrphaned:
			orphaned = append(orphaned, fmt.Sprintf("%s %s/%s", it.Host, it.Formula, it.Node))
		}
	}
	for _, o := range orphaned {
		linef(out, "  orphaned %s", o)
	}
	if len(orphaned) > 0 {
		fmt.Fprintf(out, "orphaned: not in the composition any more; run a delete to remove them (%d left as they are)\n", len(orphaned))
	}
	return drifted, targets
}

// printDryRun says what a reconcile would run, from the plan of the
// composition limited to its targets.
func printDryRun(out io.Writer, path string, body []byte, res *reconcileResult, format string) error {
	targets := strings.Join(res.Targets, ", ")
	c, err := composition.Load(path+" (with targets)", body)
	if err != nil {
		return failed("%s: with targets %s: %w", path, targets, err)
	}
	p := dag.PlanLoaded(c)
	res.Formulas = make([]string, len(p.Formulas))
	for i := range p.Formulas {
		res.Formulas[i] = p.Formulas[i].ID
	}
	if structured(format) {
		return printAs(out, format, res)
	}
	linef(out, "would run: %s", strings.Join(res.Drifted, ", "))
	linef(out, "with targets %s: formulas %s (nodes already in place with the same spec are skipped; health gates are checked)",
		targets, strings.Join(res.Formulas, ", "))
	fmt.Fprintln(out, "dry run: nothing was submitted")
	return nil
}

// reconcileSubmit is a reconcile to submit: the composition limited to
// the drifted formulas (body), and how to show it.
type reconcileSubmit struct {
	path   string
	body   []byte
	res    *reconcileResult
	output string
	watch  bool
}

// submitReconcile submits the targeted composition and, with watch,
// streams it as submit --watch does.
func submitReconcile(cmd *cobra.Command, cl *client.Client, rs reconcileSubmit) error {
	since := time.Now().Add(-time.Second)
	targets := strings.Join(rs.res.Targets, ", ")
	reply, err := sendComposition(cmd.Context(), cmd.ErrOrStderr(), cl, sent{file: rs.path, what: rs.path + " with targets " + targets, data: rs.body})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	rs.res.WorkflowID, rs.res.TraceID = reply.WorkflowID, reply.TraceID
	switch {
	case structured(rs.output) && rs.watch:
		if err := printRecord(out, rs.output, mustJSON(rs.res)); err != nil {
			return err
		}
	case structured(rs.output):
		return printAs(out, rs.output, rs.res)
	default:
		linef(out, "reconciling with targets %s", targets)
		if err := printAccepted(out, reply, "text", false, false); err != nil {
			return err
		}
	}
	if !rs.watch {
		return nil
	}
	return watchWorkflow(cmd, cl, reply.WorkflowID, since, 1, rs.output)
}
