package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/summary"
	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

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
