package cli

import (
	"github.com/gantry-dev/gantry/pkg/eventbus"

	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// envs counts the envelopes envOf made: each has an id of its own.
var envs atomic.Int64

func envOf(t *testing.T, p events.Payload) *events.Envelope {
	t.Helper()
	env, err := events.NewAt(fmt.Sprintf("ev-%d", envs.Add(1)), "test", time.Now(), p)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// Not on a terminal, the summary is printed when it changed, at most every
// interval, and at the end unless it was the last printed; on a terminal,
// it is rewritten in place under the events and ends as a line.
func TestWatchStatusLine(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	var b bytes.Buffer
	l := &statusLine{w: &b, interval: 10 * time.Second}
	l.show("a", t0)
	l.show("a", t0.Add(11*time.Second)) // unchanged
	l.show("b", t0.Add(12*time.Second))
	l.show("c", t0.Add(13*time.Second)) // too soon
	l.end("c", t0.Add(14*time.Second))
	if got, want := b.String(), "-- a\n-- b\n-- c\n"; got != want {
		t.Fatalf("not a terminal: %q, want %q", got, want)
	}
	b.Reset()
	l.end("c", t0.Add(15*time.Second))
	if b.Len() != 0 {
		t.Fatalf("the same summary printed again: %q", b.String())
	}
	b.Reset()
	l = &statusLine{w: &b, tty: true}
	l.show("a", t0)
	l.clear()
	b.WriteString("event\n")
	l.show("b", t0)
	l.end("b", t0)
	if got, want := b.String(), "-- a\r\033[Kevent\n-- b\r\033[K-- b\n"; got != want {
		t.Fatalf("terminal: %q, want %q", got, want)
	}
}

// A progress event prints as the node and its percent.
func TestWatchPrintsProgress(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	printEvent(&b, envOf(t, &events.ProgressEvent{Ref: events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "web", Host: "h1", Node: "build", Operation: dag.OpCreate, Generation: 1}, Attempt: 1, Percent: 42}))
	if !strings.Contains(b.String(), "web/build") || !strings.HasSuffix(b.String(), " 42%\n") || !strings.Contains(b.String(), "h1") {
		t.Fatalf("printed %q", b.String())
	}
}

// gantry status shows a running node's percent.
func TestStatusShowsProgress(t *testing.T) {
	t.Parallel()
	doc := &events.WorkflowDoc{WorkflowID: "w1", Workflow: "w", Status: dag.WorkflowRunning, Formulas: map[string]*events.FormulaDoc{
		"web": {Host: "h1", Status: dag.FormulaRunning, Nodes: map[string]*events.NodeDoc{
			"build": {Status: dag.NodeRunning, Attempts: 1, Progress: 42},
			"done":  {Status: dag.NodeSucceeded, Attempts: 1, Progress: 100},
		}}}}
	var b bytes.Buffer
	if err := statusTable(&b, doc); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	var build, done string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "build"):
			build = l
		case strings.Contains(l, "done"):
			done = l
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(build), "42%") || strings.Contains(done, "100%") {
		t.Fatalf("status:\n%s", b.String())
	}
}

// gantry status says why a node was skipped (another workflow put it in
// place at its turn) and what one waits for; an error comes first.
func TestStatusShowsTheReason(t *testing.T) {
	t.Parallel()
	doc := &events.WorkflowDoc{WorkflowID: "w2", Workflow: "w", Status: dag.WorkflowRunning, Formulas: map[string]*events.FormulaDoc{
		"web": {Host: "h1", Status: dag.FormulaRunning, Nodes: map[string]*events.NodeDoc{
			"install": {Status: dag.NodeSkipped, Attempts: 1, Reason: "already succeeded with the same spec in workflow w1"},
			"config":  {Status: dag.NodeRunning, Attempts: 1, Reason: "waiting for workflow w1 (the same node runs there) on this host"},
			"broken":  {Status: dag.NodeFailed, Attempts: 1, Error: "exit status 2", Reason: "ignored"},
		}}}}
	var b bytes.Buffer
	if err := statusTable(&b, doc); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"install": "already succeeded with the same spec in workflow w1",
		"config": "waiting for workflow w1 (the same node runs there) on this host", "broken": "exit status 2"} {
		found := false
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.Contains(l, " "+name+" ") && strings.HasSuffix(strings.TrimSpace(l), want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no line ends with %q:\n%s", name, want, b.String())
		}
	}
}

// TestRunGeneration: watch and logs read a run's generation from its
// gantry_runs record, which the planner compresses when it is large (a
// failed base blocking thousands of formulas).
func TestRunGeneration(t *testing.T) {
	big := events.RunSnapshot{Generation: 3, Formulas: strings.Repeat("f", 100_000)}
	rec, err := eventbus.EncodeRecord(big)
	if err != nil {
		t.Fatal(err)
	}
	if !eventbus.IsPacked(rec) {
		t.Fatalf("a %d-byte snapshot is stored plain", len(big.Formulas))
	}
	small, _ := eventbus.EncodeRecord(events.RunSnapshot{Generation: 2})
	for name, c := range map[string]struct {
		rec  []byte
		want int
		ok   bool
	}{
		"plain":      {small, 2, true},
		"compressed": {rec, 3, true},
		"damaged":    {rec[:len(rec)/2], 0, false},
		"not json":   {[]byte("nope"), 0, false},
	} {
		if g, ok := runGeneration(c.rec); g != c.want || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", name, g, ok, c.want, c.ok)
		}
	}
}

// TestLogLineEscapesControls: gantry logs prints a host's output with its
// control characters escaped, so a line cannot drive the terminal.
func TestLogLineEscapesControls(t *testing.T) {
	env := &events.Envelope{Time: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)}
	ll := &events.LogLine{Ref: events.Ref{Host: "h1", Formula: "f", Node: "n"}, Attempt: 1, Stream: events.Stdout,
		Line: "a\tb \x1b]0;pwned\x07\x1b[2J\rdone \u00e9\u009b"}
	var b strings.Builder
	if err := printLogLine(&b, env, ll, "text"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(strings.TrimSuffix(out, "\n"), "\x1b\x07\r\u009b") {
		t.Errorf("control characters printed raw: %q", out)
	}
	if want := `a` + "\t" + `b \x1b]0;pwned\x07\x1b[2J\x0ddone é\u009b`; !strings.HasSuffix(out, want+"\n") {
		t.Errorf("line printed as %q, want it to end %q", out, want)
	}
}
