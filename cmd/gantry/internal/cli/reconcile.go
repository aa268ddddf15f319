package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func newReconcileCmd() *cobra.Command {
	var cf connFlags
	var vf *varFlags
	var watch, dryRun bool
	var output string
	cmd := &cobra.Command{
		Use:   "reconcile FILE",
		Short: "Run only what drift reports missing or changed",
		Long: `reconcile asks the state for the composition's drift (as gantry drift does)
and submits the composition limited to the formulas holding the nodes drift
reports missing or changed. In them, and in their prerequisites, every node
already in place with the same spec is skipped as already done, so only the
drifted nodes run (the prerequisites' health gates are checked again).
Orphaned nodes (in place, but no longer in the composition) are listed and
left alone: a delete removes them. When nothing is missing or changed it
says "nothing to reconcile" and submits nothing. With --dry-run it prints
what it would run and submits nothing; with --watch it streams the run as
gantry submit --watch does. The composition must not set targets or reset:
reconcile chooses what runs. Give the --var and --var-file it was submitted
with (gantry status shows them): drift and the run both use them. -o json
(or yaml) prints {"workflow", "counts", "drifted", "orphaned", "targets",
"formulas", "dry_run", "workflow_id", "trace_id"} instead of the text.`,
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
			connect := cf.connectOperator // it submits
			if dryRun {
				connect = cf.connect
			}
			nc, err := connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			var rep events.DriftReport
			if err := request(nc, events.StateDrift, data, cf.timeout, &rep); err != nil {
				return stateErr(err)
			}
			out := cmd.OutOrStdout()
			res := newReconcileResult(&rep, dryRun)
			if !structured(output) {
				printDrift(out, &rep)
			}
			if len(res.Drifted) == 0 {
				return res.print(out, output, "nothing to reconcile")
			}
			tree.Set("targets", dag.Strings(res.Targets))
			body, err := tree.MarshalJSON()
			if err != nil {
				return failed("%s: %w", path, err)
			}
			if dryRun {
				return printDryRun(out, path, body, res, output)
			}
			return submitReconcile(cmd, nc, cf, reconcileSubmit{path: path, body: body, res: res, output: output, watch: watch})
		},
	}
	cf.add(cmd)
	vf = addVarFlags(cmd)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "stream the run until it ends")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would run; submit nothing")
	outputFlag(cmd, &output, "text", formatJSON)
	return cmd
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

// printDrift prints the drift summary and what is out of place.
func printDrift(out io.Writer, rep *events.DriftReport) {
	linef(out, "drift of %s: %d ok, %d changed, %d missing, %d orphaned", rep.Workflow,
		rep.Counts[events.DriftOK], rep.Counts[events.DriftChanged], rep.Counts[events.DriftMissing], rep.Counts[events.DriftOrphaned])
	var orphaned []string
	for _, it := range rep.Items {
		switch it.Drift {
		case events.DriftMissing, events.DriftChanged:
			linef(out, "  %-8s %s %s/%s", it.Drift, it.Host, it.Formula, it.Node)
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
}

// reconcileResult is what reconcile found and did, as -o json prints it.
type reconcileResult struct {
	Workflow   string             `json:"workflow"`
	Counts     map[string]int     `json:"counts"`
	Drifted    []events.DriftItem `json:"drifted"`  // missing or changed: what runs
	Orphaned   []events.DriftItem `json:"orphaned"` // left alone
	Targets    []string           `json:"targets"`  // the formulas holding the drifted nodes
	Formulas   []string           `json:"formulas,omitempty"`
	DryRun     bool               `json:"dry_run"`
	WorkflowID string             `json:"workflow_id,omitempty"`
	TraceID    string             `json:"trace_id,omitempty"`
}

// newReconcileResult sorts a drift report into what runs and what is left
// alone.
func newReconcileResult(rep *events.DriftReport, dryRun bool) *reconcileResult {
	res := &reconcileResult{Workflow: rep.Workflow, Counts: rep.Counts, Drifted: []events.DriftItem{}, Orphaned: []events.DriftItem{}, Targets: []string{}, DryRun: dryRun}
	for _, it := range rep.Items {
		switch it.Drift {
		case events.DriftMissing, events.DriftChanged:
			res.Drifted = append(res.Drifted, it)
			if !slices.Contains(res.Targets, it.Formula) {
				res.Targets = append(res.Targets, it.Formula)
			}
		case events.DriftOrphaned:
			res.Orphaned = append(res.Orphaned, it)
		}
	}
	return res
}

// print prints the result as JSON or YAML, or the line text.
func (r *reconcileResult) print(w io.Writer, format, text string) error {
	if structured(format) {
		return printAs(w, format, r)
	}
	fmt.Fprintln(w, text)
	return nil
}

// driftedText is each drifted node as "formula/node (drift on host)".
func (r *reconcileResult) driftedText() []string {
	out := make([]string, len(r.Drifted))
	for i, it := range r.Drifted {
		out[i] = fmt.Sprintf("%s/%s (%s on %s)", it.Formula, it.Node, it.Drift, it.Host)
	}
	return out
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
	linef(out, "would run: %s", strings.Join(res.driftedText(), ", "))
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
func submitReconcile(cmd *cobra.Command, nc *nats.Conn, cf connFlags, rs reconcileSubmit) error {
	since := time.Now().Add(-time.Second)
	targets := strings.Join(rs.res.Targets, ", ")
	reply, err := sendComposition(cmd.ErrOrStderr(), nc, cf.timeout, sent{file: rs.path, what: rs.path + " with targets " + targets, data: rs.body})
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
	return watchWorkflow(cmd, nc, reply.WorkflowID, since, 1, rs.output)
}
