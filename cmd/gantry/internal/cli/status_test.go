package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// gantry status lists formulas and their nodes in the order they ran (by
// start; a blocked one, which never started, by its end; what has neither
// last), not by name, with how long each took, and shows the trace.
func TestStatusInRunOrderWithDurations(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) *time.Time { v := t0.Add(time.Duration(s * float64(time.Second))); return &v }
	doc := &events.WorkflowDoc{WorkflowID: "w1", Workflow: "w", Status: dag.WorkflowRunning, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
		Formulas: map[string]*events.FormulaDoc{
			"zeta": {Host: "h1", Status: dag.FormulaSucceeded, StartedAt: at(0), EndedAt: at(75), Nodes: map[string]*events.NodeDoc{
				"zz-first":  {Status: dag.NodeSucceeded, Attempts: 1, StartedAt: at(0), EndedAt: at(2.5)},
				"mm-second": {Status: dag.NodeSucceeded, Attempts: 1, StartedAt: at(2.5), EndedAt: at(75)},
				"aa-third":  {Status: dag.NodeRunning, Attempts: 1, StartedAt: at(75)},
			}},
			"alpha": {Host: "h2", Status: dag.FormulaRunning, StartedAt: at(80), Nodes: map[string]*events.NodeDoc{}},
			"beta":  {Host: "h1", Status: dag.FormulaBlocked, Blocker: "zeta", EndedAt: at(90), Nodes: map[string]*events.NodeDoc{}},
			"aaa":   {Host: "h3", Status: dag.FormulaPending, Nodes: map[string]*events.NodeDoc{}},
		}}
	var b bytes.Buffer
	if err := statusTableAt(&b, doc, t0.Add(100*time.Second)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var names []string
	took := map[string]string{}
	header := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "FORMULA") })
	col := strings.Index(lines[header], "TOOK")
	for _, l := range lines[header+1:] {
		f := strings.Fields(l)
		names = append(names, f[0])
		took[f[0]] = strings.Fields(string([]rune(l)[col:]))[0]
	}
	want := []string{"zeta", "zz-first", "mm-second", "aa-third", "alpha", "beta", "aaa"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("rows %v, want %v (run order):\n%s", names, want, out)
	}
	for name, d := range map[string]string{"zeta": "1m15s", "zz-first": "2.5s", "mm-second": "1m13s", "aa-third": "25s…", "alpha": "20s…", "beta": "-", "aaa": "-"} {
		if took[name] != d {
			t.Errorf("%s took %q, want %q:\n%s", name, took[name], d, out)
		}
	}
	if !strings.Contains(out, "TOOK") || !strings.Contains(out, "  trace 4bf92f3577b34da6a3ce929d0e0e4736\n") {
		t.Errorf("no TOOK column or no trace:\n%s", out)
	}
}

func TestDurationText(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		400 * time.Millisecond: "0.4s", 9940 * time.Millisecond: "9.9s", 12 * time.Second: "12s",
		185 * time.Second: "3m05s", 62*time.Minute + 10*time.Second: "1h02m", -time.Second: "0s",
	} {
		if got := durationText(d); got != want {
			t.Errorf("durationText(%s) = %q, want %q", d, got, want)
		}
	}
}
