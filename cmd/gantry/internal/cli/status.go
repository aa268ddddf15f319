package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/summary"
	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// stateErr turns a state-store error reply into a CLI error.
func stateErr(err error) error {
	var se *serviceError
	if errors.As(err, &se) {
		if se.Code == "404" {
			return failed("%s", se.Description)
		}
		return &exitError{code: ExitProblem, err: fmt.Errorf("state-store: %s", se.Description)}
	}
	return err
}

// printJSON prints v as indented JSON, safe on a terminal (see
// termsafe.JSON).
func printJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a command's &&, < and > as they are
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s\n", termsafe.JSON(bytes.TrimRight(b.Bytes(), "\n")))
	return err
}

// linef writes a line formatted as fmt.Sprintf does, with control
// characters shown escaped (newlines too): a line that quotes what a host,
// a service or a composition said cannot drive the terminal, nor pass for
// more lines than one.
func linef(w io.Writer, format string, args ...any) {
	fmt.Fprintln(w, termsafe.Line(fmt.Sprintf(format, args...)))
}

// row writes a row of a table (a text/tabwriter): its cells between tabs,
// each with control characters, tabs too, shown escaped: a host's name or
// error can neither drive the terminal nor move the columns.
func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(w, "\t")
		}
		io.WriteString(w, termsafe.Cell(c))
	}
	io.WriteString(w, "\n")
}

func newStatusCmd() *cobra.Command {
	var cf connFlags
	var output string
	cmd := &cobra.Command{
		Use:   "status WORKFLOW_ID",
		Short: "Show a workflow's formulas and nodes",
		Long: `status prints a workflow's state from the state-store: its nodes counted
by state as gantry watch counts them ("9/9 nodes done, 0 running, 1
failed"), a row per formula and node, each failed health gate's last check
(its exit status and the last lines it printed), and what failed. -o json
prints the workflow document, its top-level "status" the workflow's state,
with that count and the failures under "summary".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return &exitError{code: ExitUsage, err: fmt.Errorf("unknown -o %q: use table or json", output)}
			}
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			var doc events.WorkflowDoc
			if err := request(nc, events.StateWorkflow, mustJSON(events.WorkflowQuery{WorkflowID: args[0]}), cf.timeout, &doc); err != nil {
				return stateErr(err)
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), statusDoc{WorkflowDoc: &doc, Summary: summary.FromDoc(&doc)})
			}
			return statusTable(cmd.OutOrStdout(), &doc)
		},
	}
	cf.add(cmd)
	outputFlag(cmd, &output, "table", "json")
	return cmd
}

// statusTable prints a workflow document: its state, error, submitter and
// control requests, and a row per formula and node. What hosts and the bus
// said is shown with control characters escaped; the workflow's error keeps
// its lines, indented.
func statusTable(w io.Writer, d *events.WorkflowDoc) error {
	fmt.Fprintln(w, termsafe.Line(fmt.Sprintf("workflow %s (%s)  %s  %s", d.Workflow, d.WorkflowID, d.Operation, strings.ToUpper(string(d.Status)))))
	if d.Error != "" {
		fmt.Fprintf(w, "  %s\n", termsafe.Lines(d.Error, "    "))
	}
	if d.SubmittedBy != nil {
		fmt.Fprintf(w, "  submitted by %s\n", termsafe.Line(d.SubmittedBy.Display())) // -o json keeps the key
	}
	if len(d.Vars) > 0 {
		fmt.Fprintf(w, "  vars (--var, --var-file): %s\n", termsafe.Line(varsText(d.Vars)))
	}
	for _, r := range d.Requests {
		fmt.Fprintf(w, "  %s %s by %s\n", r.At.Local().Format("15:04:05"), termsafe.Line(r.Reason), termsafe.Line(r.By.Display()))
	}
	sum := summary.FromDoc(d)
	fmt.Fprintf(w, "  %s\n", termsafe.Line(sum.String()))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FORMULA\tHOST\tNODE\tSTATUS\tATTEMPTS\tEXIT\tDETAIL")
	ids := make([]string, 0, len(d.Formulas))
	for id := range d.Formulas {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		return startOf(d.Formulas[ids[i]]).Before(startOf(d.Formulas[ids[j]])) || ids[i] < ids[j] && startOf(d.Formulas[ids[i]]).Equal(startOf(d.Formulas[ids[j]]))
	})
	for _, id := range ids {
		f := d.Formulas[id]
		detail := f.Error
		if f.Blocker != "" {
			detail = blockerText(f.Status, f.Blocker)
		}
		if f.Health != nil {
			// the gate's failure is the formula's error too: said once
			if ht := healthText(f.Health); strings.Contains(ht, detail) {
				detail = ht
			} else {
				detail += " " + ht
			}
		}
		row(tw, id, f.Host, "", string(f.Status), "", "", detail)
		names := make([]string, 0, len(f.Nodes))
		for n := range f.Nodes {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			nd := f.Nodes[n]
			exit := ""
			if nd.ExitCode != nil {
				exit = strconv.Itoa(*nd.ExitCode)
			}
			detail := firstLine(nd.Error)
			if detail == "" {
				detail = firstLine(nd.Reason) // why skipped or cancelled, what it waits for
			}
			if nd.Blocker != "" {
				detail = blockerText(nd.Status, nd.Blocker)
			}
			if nd.Check != "" {
				detail = string(nd.Check)
			}
			if nd.Status == dag.NodeRunning && nd.Progress > 0 {
				detail = strings.TrimSpace(fmt.Sprintf("%d%% %s", nd.Progress, detail))
			}
			row(tw, "", "", n, string(nd.Status), strconv.Itoa(nd.Attempts), exit, detail)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printGates(w, d, ids)
	if line := sum.FailedLine(d.WorkflowID); line != "" {
		fmt.Fprintln(w, termsafe.Cell(line)) // a tab in an error shown escaped, as in the table
	}
	return nil
}

// statusDoc is what status -o json prints: the workflow document, and
// its summary.
type statusDoc struct {
	*events.WorkflowDoc
	Summary summary.Summary `json:"summary"`
}

// healthText is a formula's health gate as its row says it.
func healthText(h *events.HealthDoc) string {
	exit := ""
	if h.ExitCode != nil && h.Status == events.HealthFail {
		exit = fmt.Sprintf(" (exit %d)", *h.ExitCode)
	}
	switch {
	case h.Status == events.HealthFail && h.Final:
		return h.GateFailure() + exit
	case h.Status == events.HealthFail:
		return fmt.Sprintf("health check %d failed%s", h.Attempts, exit)
	}
	return fmt.Sprintf("health %s after %d", h.Status, h.Attempts)
}

// printGates prints the last lines the last check of each failing health
// gate printed, indented under a line naming it.
func printGates(w io.Writer, d *events.WorkflowDoc, ids []string) {
	for _, id := range ids {
		h := d.Formulas[id].Health
		if h == nil || h.Status != events.HealthFail {
			continue
		}
		lines := events.LastLines(h.Output, gateLines)
		if len(lines) == 0 {
			continue
		}
		what := fmt.Sprintf("health gate of %s on %s, check %d", id, d.Formulas[id].Host, h.Attempts)
		if h.ExitCode != nil {
			what += fmt.Sprintf(" (exit %d)", *h.ExitCode)
		}
		fmt.Fprintln(w, termsafe.Line(what)+":")
		for _, l := range lines {
			fmt.Fprintln(w, "    "+termsafe.Line(l))
		}
	}
}

func startOf(f *events.FormulaDoc) time.Time {
	if f.StartedAt != nil {
		return *f.StartedAt
	}
	if f.EndedAt != nil {
		return *f.EndedAt
	}
	return time.Time{}
}

func newListCmd() *cobra.Command {
	var cf connFlags
	var limit int
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workflows, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			var rows []events.WorkflowSummary
			if err := request(nc, events.StateList, mustJSON(events.ListQuery{Limit: limit}), cf.timeout, &rows); err != nil {
				return stateErr(err)
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKFLOW_ID\tNAME\tOPERATION\tSTATUS\tFORMULAS\tNODES\tCREATED")
			for _, r := range rows {
				row(tw, r.WorkflowID, r.Workflow, string(r.Operation), string(r.Status), strconv.Itoa(r.Formulas), strconv.Itoa(r.Nodes), r.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cf.add(cmd)
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many")
	outputFlag(cmd, &output, "table", "json")
	return cmd
}

func newStateCmd() *cobra.Command {
	var cf connFlags
	var host, output string
	var rebuild, check bool
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Show what each host has: every composition's nodes, their last state and what is in place",
		Long: `state prints the per-host projection: a row per node of a composition on a
host. STATUS, OPERATION, SPEC, ENDED and WORKFLOW_ID are of the node's last
transition in a create or delete, whatever it was (a node blocked or cancelled
shows so). IN_PLACE says whether a create of the composition completed the node
and nothing has run it since ("yes, spec ..." when that create had another
spec than the one shown). CHECK is what the last operation: check run found
(ok or would_change; its state when it could not tell); a check changes
nothing else.

--rebuild replays the event stream and rewrites the projection where it
differs; --rebuild --check only compares. Both also check the stream itself
and list each problem with its workflow, node and stream sequences: an event
stored more than once (duplicate), a transition stored after one it comes
before in the same run, such as a node's running after its succeeded
(out_of_order; the projection applies neither), and a node the stream leaves
in another state than its executor recorded in gantry_nodes
(contradicts_record). It exits 1 when the projection differs (--check) or the
stream has a problem. --timeout bounds the whole call (default 5m for a
rebuild): past it, it exits 3 saying so, and the state-store gives up too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if rebuild || check {
				timeout := 5 * time.Minute
				if cmd.Flags().Changed("timeout") {
					timeout = cf.timeout
				}
				return rebuildState(cmd, cf, check, time.Now().Add(timeout), timeout)
			}
			if p := dag.HostNameProblem(host); host != "" && p != "" {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--host: host name %s", p)}
			}
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			var nodes []events.HostNode
			if err := request(nc, events.StateHost, mustJSON(events.HostQuery{Host: host}), cf.timeout, &nodes); err != nil {
				return stateErr(err)
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), nodes)
			}
			return printHostNodes(cmd.OutOrStdout(), nodes)
		},
	}
	cf.add(cmd)
	cmd.Flags().StringVar(&host, "host", "", "only this host, by its name (10.0.0.5, web-1.example.com)")
	outputFlag(cmd, &output, "table", "json")
	cmd.Flags().BoolVar(&rebuild, "rebuild", false, "rebuild the projection from the event stream, replacing what differs")
	cmd.Flags().BoolVar(&check, "check", false, "with --rebuild: only compare the projection with a rebuild (exit 1 if they differ)")
	return cmd
}

// printHostNodes prints the per-host projection as a table, a row per
// node of a composition on a host: its last transition in a create or
// delete (status, operation, spec, end, workflow id), whether a create's
// work is in place, and the last check's finding.
func printHostNodes(w io.Writer, nodes []events.HostNode) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tCOMPOSITION\tFORMULA\tNODE\tSTATUS\tOPERATION\tSPEC\tENDED\tIN_PLACE\tCHECK\tWORKFLOW_ID")
	for _, n := range nodes {
		ended := "-"
		if n.EndedAt != nil {
			ended = n.EndedAt.Local().Format(time.DateTime)
		}
		row(tw, n.Host, orDash(n.Workflow), n.Formula, n.Node, string(n.Status), orDash(string(n.Operation)),
			orDash(shortSpec(n.SpecHash)), ended, inPlaceText(n), checkText(n.Check), orDash(n.WorkflowID))
	}
	return tw.Flush()
}

// inPlaceText says whether a create's work is in place: yes, with the spec
// it was done with when that is not the one shown.
func inPlaceText(n events.HostNode) string {
	switch {
	case n.InPlace == nil:
		return "no"
	case n.InPlace.SpecHash != n.SpecHash:
		return "yes, spec " + shortSpec(n.InPlace.SpecHash)
	}
	return "yes"
}

// checkText is the last check run's finding (ok, would_change), or its state
// when it gave none (running, failed, ...).
func checkText(c *events.HostCheck) string {
	switch {
	case c == nil:
		return "-"
	case c.Result != "":
		return string(c.Result)
	}
	return string(c.Status)
}

func shortSpec(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// rebuildState asks the state-store for a rebuild (or, checkOnly, a
// comparison) and prints what it found, all by deadline (timeout: the
// --timeout it comes from).
func rebuildState(cmd *cobra.Command, cf connFlags, checkOnly bool, deadline time.Time, timeout time.Duration) error {
	nc, err := cf.connectOperator()
	if err != nil {
		return err
	}
	defer nc.Close()
	left := time.Until(deadline)
	var rep events.RebuildReport
	q := events.RebuildQuery{CheckOnly: checkOnly, TimeoutMS: left.Milliseconds()}
	if left <= 0 {
		err = nats.ErrTimeout
	} else {
		err = request(nc, events.StateRebuild, mustJSON(q), left, &rep)
	}
	if errors.Is(err, nats.ErrTimeout) {
		return &exitError{code: ExitProblem, err: fmt.Errorf("%s: no answer from the state-store within --timeout %s (a rebuild waits for the projection to catch up with the stream, then replays it all; give it a longer --timeout)", events.StateRebuild, timeout)}
	}
	if err != nil {
		return stateErr(err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "replayed the event stream up to sequence %d: %d documents, %d differ from the projection\n", rep.UpTo, rep.Keys, len(rep.Differing))
	kept := map[string]bool{}
	for _, k := range rep.Kept {
		kept[k] = true
	}
	for _, k := range rep.Differing {
		if kept[k] {
			fmt.Fprintf(out, "  %s (kept)\n", termsafe.Line(k))
		} else {
			fmt.Fprintf(out, "  %s\n", termsafe.Line(k))
		}
	}
	if rep.Lost != "" {
		fmt.Fprintf(out, "not rebuilt: %s (%d documents)\n", termsafe.Line(rep.Lost), len(rep.Kept))
	}
	problems := printFindings(out, &rep)
	var why []string
	switch {
	case rep.Rewritten:
		fmt.Fprintln(out, "the projection was rewritten from the stream")
	case checkOnly && len(rep.Differing) > len(rep.Kept):
		why = append(why, "the projection differs from the event stream")
	}
	if problems > 0 {
		why = append(why, fmt.Sprintf("the event stream has %d problem(s)", problems))
	}
	if len(why) > 0 {
		return failed("%s", strings.Join(why, "; "))
	}
	return nil
}

// printFindings prints what the rebuild found wrong in the stream itself,
// one line each, and returns how many it found.
func printFindings(w io.Writer, rep *events.RebuildReport) int {
	n := len(rep.Findings) + rep.MoreFindings
	fmt.Fprintf(w, "checked the event stream of %d workflow(s): %d problem(s)\n", rep.Workflows, n)
	for _, f := range rep.Findings {
		what := f.Formula
		if f.Node != "" {
			what += "/" + f.Node
		}
		seqs := make([]string, len(f.Seqs))
		for i, s := range f.Seqs {
			seqs[i] = strconv.FormatUint(s, 10)
		}
		fmt.Fprintln(w, termsafe.Line(fmt.Sprintf("  %-18s workflow %s %s at stream sequence %s: %s", f.Kind, f.WorkflowID, orDash(what), strings.Join(seqs, ", "), f.Detail)))
	}
	if rep.MoreFindings > 0 {
		fmt.Fprintf(w, "  and %d more\n", rep.MoreFindings)
	}
	return n
}

func newDriftCmd() *cobra.Command {
	var cf connFlags
	var vf *varFlags
	var output string
	cmd := &cobra.Command{
		Use:   "drift FILE",
		Short: "Compare a composition with what its hosts have",
		Long: `drift compares the composition with what its own earlier runs left on its
hosts: each node is ok (a create of this composition put it in place with the
same spec), changed (in place with another spec hash), or missing (never
created, deleted, or its last run did not complete; a check run does not
count), and each node the composition put in place on its hosts but no longer
has is orphaned. Other compositions' nodes on the same hosts are theirs, and
are not reported. It exits 0 when everything is ok and 1 when anything drifted.
Give the --var and --var-file the composition was submitted with: a var a
command uses changes its spec.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := vf.readForSubmit(cmd.ErrOrStderr(), args[0])
			if err != nil {
				return err
			}
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			var rep events.DriftReport
			if err := request(nc, events.StateDrift, data, cf.timeout, &rep); err != nil {
				var se *serviceError
				var reply events.SubmitReply
				if errors.As(err, &se) && json.Unmarshal(se.Body, &reply) == nil && len(reply.Errors) > 0 {
					for _, m := range reply.Errors {
						fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", termsafe.Line(args[0]), termsafe.Line(m))
					}
					return failed("%s is not a valid composition", args[0])
				}
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
				return failed("")
			}
			return nil
		},
	}
	cf.add(cmd)
	vf = addVarFlags(cmd)
	outputFlag(cmd, &output, "table", "json")
	return cmd
}

// blockerText says why a formula or node did not run: blocked by a failed
// prerequisite, or cancelled (on_failure stop) after another failed.
func blockerText[S ~string](status S, blocker string) string {
	if string(status) == string(dag.NodeCancelled) {
		return "not started: " + blocker + " failed"
	}
	return "blocked by " + blocker
}

// outputFlag registers -o with its formats (the first is the default) and
// refuses any other value before the command does anything.
func outputFlag(cmd *cobra.Command, output *string, formats ...string) {
	cmd.Flags().StringVarP(output, "output", "o", formats[0], strings.Join(formats, " or "))
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if !slices.Contains(formats, *output) {
			return &exitError{code: ExitUsage, err: fmt.Errorf("unknown -o %q: use %s", *output, strings.Join(formats, " or "))}
		}
		return nil
	}
}
