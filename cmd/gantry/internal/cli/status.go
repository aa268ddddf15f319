package cli

import (
	"cmp"
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
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

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
		ValidArgsFunction: cf.completeWorkflowIDs,
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

// blockerText says why a formula or node did not run: blocked by a failed
// prerequisite, or cancelled (on_failure stop) after another failed.
func blockerText[S ~string](status S, blocker string) string {
	if string(status) == string(dag.NodeCancelled) {
		return "not started: " + blocker + " failed"
	}
	return "blocked by " + blocker
}
