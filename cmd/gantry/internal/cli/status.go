package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/summary"
	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/client"
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
	var se *client.ServiceError
	if errors.As(err, &se) {
		if se.Code == "404" {
			return failed("%s", se.Description)
		}
		return &exitError{code: ExitProblem, err: fmt.Errorf("state-store: %s", se.Description)}
	}
	return busErr(err)
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
failed"), a row per formula and its nodes, in the order they ran (by start
time; one blocked or cancelled before it started by when that was; what
has not started yet last), with how long each took (or, with "…", has
been running), each failed health gate's last check (its exit status and
the last lines it printed), and what failed. WORKFLOW_ID may be any
unique start of a workflow's id (as gantry list prints them). -o json (or yaml)
prints the workflow document, its top-level "status" the workflow's state,
with that count and the failures under "summary".`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeWorkflowIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := cf.connect()
			if err != nil {
				return err
			}
			defer cl.Close()
			id, doc, err := resolveDoc(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			if doc == nil { // a prefix: the document of the id it names
				if doc, err = cl.Status(cmd.Context(), id); err != nil {
					return stateErr(err)
				}
			}
			if structured(output) {
				return printAs(cmd.OutOrStdout(), output, statusDoc{WorkflowDoc: doc, Summary: summary.FromDoc(doc)})
			}
			return statusTable(cmd.OutOrStdout(), doc)
		},
	}
	cf.add(cmd)
	outputFlag(cmd, &output, "table", "json")
	return cmd
}

// statusTable prints a workflow document: its state, error, submitter and
// control requests, and a row per formula and node, in the order they ran,
// with how long each took. What hosts and the bus said is shown with
// control characters escaped; the workflow's error keeps its lines,
// indented.
func statusTable(w io.Writer, d *events.WorkflowDoc) error {
	return statusTableAt(w, d, time.Now())
}

// statusTableAt is statusTable at time now (what has run since its start
// and not ended has been running until now).
func statusTableAt(w io.Writer, d *events.WorkflowDoc, now time.Time) error {
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
	if d.TraceID != "" {
		fmt.Fprintf(w, "  trace %s\n", termsafe.Line(d.TraceID))
	}
	for _, r := range d.Requests {
		fmt.Fprintf(w, "  %s %s by %s\n", r.At.Local().Format("15:04:05"), termsafe.Line(r.Reason), termsafe.Line(r.By.Display()))
	}
	sum := summary.FromDoc(d)
	fmt.Fprintf(w, "  %s\n", termsafe.Line(sum.String()))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FORMULA\tHOST\tNODE\tSTATUS\tATTEMPTS\tEXIT\tTOOK\tDETAIL")
	for _, id := range formulasInRunOrder(d) {
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
		row(tw, id, f.Host, "", string(f.Status), "", "", took(f.StartedAt, f.EndedAt, now), detail)
		for _, n := range nodesInRunOrder(f) {
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
			if detail == "" {
				detail = outputsText(nd)
			}
			row(tw, "", "", n, string(nd.Status), strconv.Itoa(nd.Attempts), exit, took(nd.StartedAt, nd.EndedAt, now), detail)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printNodeFiles(w, d)
	printGates(w, d, formulasInRunOrder(d))
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

// runOrder is where a formula or node stands in the order a workflow ran:
// by its start (else its end: a blocked or cancelled one never started),
// then by the stream sequence of its last event; one with neither comes
// after all that have one.
type runOrder struct {
	at   *time.Time
	seq  uint64
	name string
}

func (a runOrder) compare(b runOrder) int {
	switch {
	case a.at == nil && b.at != nil:
		return 1
	case a.at != nil && b.at == nil:
		return -1
	case a.at != nil && !a.at.Equal(*b.at):
		return a.at.Compare(*b.at)
	case a.seq != b.seq:
		return cmp.Compare(a.seq, b.seq)
	}
	return strings.Compare(a.name, b.name)
}

// outputsText names the outputs a node handed on (their values are in
// -o json, but the secret ones', which nothing shows).
func outputsText(nd *events.NodeDoc) string {
	names := make([]string, 0, len(nd.Outputs)+len(nd.SecretOutputs))
	for k := range nd.Outputs {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range nd.SecretOutputs {
		names = append(names, k+" (secret)")
	}
	if len(names) == 0 {
		return ""
	}
	return "outputs: " + strings.Join(names, ", ")
}

func formulasInRunOrder(d *events.WorkflowDoc) []string {
	ids := slices.Collect(maps.Keys(d.Formulas))
	slices.SortFunc(ids, func(a, b string) int {
		fa, fb := d.Formulas[a], d.Formulas[b]
		return runOrder{cmp.Or(fa.StartedAt, fa.EndedAt), fa.LastSeq, a}.compare(runOrder{cmp.Or(fb.StartedAt, fb.EndedAt), fb.LastSeq, b})
	})
	return ids
}

func nodesInRunOrder(f *events.FormulaDoc) []string {
	names := slices.Collect(maps.Keys(f.Nodes))
	slices.SortFunc(names, func(a, b string) int {
		na, nb := f.Nodes[a], f.Nodes[b]
		return runOrder{cmp.Or(na.StartedAt, na.EndedAt), na.LastSeq, a}.compare(runOrder{cmp.Or(nb.StartedAt, nb.EndedAt), nb.LastSeq, b})
	})
	return names
}

// took is how long something ran: from its start to its end, or to now
// while it runs ("…" after it); "-" when it never started.
func took(start, end *time.Time, now time.Time) string {
	switch {
	case start == nil:
		return "-"
	case end == nil:
		return durationText(now.Sub(*start)) + "…"
	}
	return durationText(end.Sub(*start))
}

// durationText is d rounded for reading: 0.4s, 12s, 3m05s, 1h02m.
func durationText(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
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
			cl, err := cf.connect()
			if err != nil {
				return err
			}
			defer cl.Close()
			rows, err := cl.List(cmd.Context(), limit)
			if err != nil {
				return stateErr(err)
			}
			if structured(output) {
				return printAs(cmd.OutOrStdout(), output, rows)
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
				return rebuildState(cmd, cf, rebuildAsk{checkOnly: check, deadline: time.Now().Add(timeout), timeout: timeout, output: output})
			}
			if p := dag.HostNameProblem(host); host != "" && p != "" {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--host: host name %s", p)}
			}
			cl, err := cf.connect()
			if err != nil {
				return err
			}
			defer cl.Close()
			nodes, err := cl.Host(cmd.Context(), host)
			if err != nil {
				return stateErr(err)
			}
			if structured(output) {
				return printAs(cmd.OutOrStdout(), output, nodes)
			}
			return printHostNodes(cmd.OutOrStdout(), nodes)
		},
	}
	cf.add(cmd)
	cmd.Flags().StringVar(&host, "host", "", "only this host, by its name (10.0.0.5, web-1.example.com)")
	_ = cmd.RegisterFlagCompletionFunc("host", completeKnownHosts)
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

// rebuildAsk is a rebuild to ask for: only a comparison (checkOnly), all
// by deadline (timeout: the --timeout it comes from), printed as output
// says.
type rebuildAsk struct {
	checkOnly bool
	deadline  time.Time
	timeout   time.Duration
	output    string
}

// rebuildState asks the state-store for a rebuild (or a comparison) and
// prints what it found.
func rebuildState(cmd *cobra.Command, cf connFlags, ask rebuildAsk) error {
	checkOnly, deadline, timeout := ask.checkOnly, ask.deadline, ask.timeout
	cl, err := cf.connectOperator()
	if err != nil {
		return err
	}
	defer cl.Close()
	left := time.Until(deadline)
	var rep events.RebuildReport
	q := events.RebuildQuery{CheckOnly: checkOnly, TimeoutMS: left.Milliseconds()}
	if left <= 0 {
		err = nats.ErrTimeout
	} else {
		rep, err = cl.WithTimeout(left).Rebuild(cmd.Context(), q)
	}
	if errors.Is(err, nats.ErrTimeout) {
		return &exitError{code: ExitProblem, err: fmt.Errorf("%s: no answer from the state-store within --timeout %s (a rebuild waits for the projection to catch up with the stream, then replays it all; give it a longer --timeout)", events.StateRebuild, timeout)}
	}
	if err != nil {
		return stateErr(err)
	}
	out := cmd.OutOrStdout()
	if structured(ask.output) {
		if err := printAs(out, ask.output, rep); err != nil {
			return err
		}
		return rebuildVerdict(&rep, checkOnly, len(rep.Findings)+rep.MoreFindings)
	}
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
	if rep.Rewritten {
		fmt.Fprintln(out, "the projection was rewritten from the stream")
	}
	return rebuildVerdict(&rep, checkOnly, problems)
}

// rebuildVerdict is ExitFailed, saying why, when the projection differs
// (checkOnly) or the stream has problems.
func rebuildVerdict(rep *events.RebuildReport, checkOnly bool, problems int) error {
	var why []string
	switch {
	case rep.Rewritten:
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

// blockerText says why a formula or node did not run: blocked by a failed
// prerequisite, or cancelled (on_failure stop) after another failed.
func blockerText[S ~string](status S, blocker string) string {
	if string(status) == string(dag.NodeCancelled) {
		return "not started: " + blocker + " failed"
	}
	return "blocked by " + blocker
}
