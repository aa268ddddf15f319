package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

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
