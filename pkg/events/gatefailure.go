package events

import (
	"fmt"
	"strings"
)

// GateFailure says why a health gate failed, in the words the planner's
// reason, gantry watch, gantry status and the web view all use: "health
// gate failed after 3 checks: pg_isready: no response". The last line the
// last check printed comes first; without one, what its failure was (exit
// status 2, the host could not be reached).
func GateFailure(checks int, output, errText string) string {
	what := lastLine(output)
	if what == "" {
		what = errText
		if _, last, ok := strings.Cut(errText, "; last: "); ok {
			what = last
		}
		what = firstLine(what)
	}
	s := fmt.Sprintf("health gate failed after %d check", checks)
	if checks != 1 {
		s += "s"
	}
	if what != "" {
		s += ": " + what
	}
	return s
}

// GateFailure says why the gate failed, for a final failing check.
func (e *HealthEvent) GateFailure() string { return GateFailure(e.Attempt, e.OutputTail, e.Error) }

// GateFailure says why the gate failed, for a final failing verdict.
func (h *HealthDoc) GateFailure() string { return GateFailure(h.Attempts, h.Output, h.Error) }

// lastLine is the last line of s that is not blank, trimmed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

// firstLine is the first line of s, trimmed.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s
}

// LastLines are the last n lines of s that are not blank, in order.
func LastLines(s string, n int) []string {
	var out []string
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := len(lines) - 1; i >= 0 && len(out) < n; i-- {
		if strings.TrimSpace(lines[i]) != "" {
			out = append(out, strings.TrimRight(lines[i], "\r"))
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
