package webview_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

func apply(t *testing.T, m *webview.Model, items ...webview.Item) (last webview.Patch) {
	t.Helper()
	for _, it := range items {
		switch {
		case it.Event != nil:
			last = m.ApplyEvent(it.Event)
		case it.Line != nil:
			last = m.ApplyLine(it.Line)
		}
	}
	return last
}

func nodeOf(t *testing.T, m *webview.Model, key string) *webview.Node {
	t.Helper()
	for _, n := range m.Snapshot().Nodes {
		if n.Formula+"/"+n.Name == key {
			return n
		}
	}
	t.Fatalf("no node %s", key)
	return nil
}

func TestModelAttemptsAndRetries(t *testing.T) {
	m := webview.NewModel(wfID)
	one := 1
	failed := &events.NodeEvent{Ref: ref("base", "h1", "a"), Status: dag.NodeFailed, WillRetry: true,
		Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t0, ExitCode: &one, Error: "exit status 1"}, StderrTail: "boom\n"}
	apply(t, m, accepted(t), node(t, "base", "a", dag.NodeRunning, 1), env(t, failed), node(t, "base", "a", dag.NodeRunning, 2), node(t, "base", "a", dag.NodeSucceeded, 2))
	n := nodeOf(t, m, "base/a")
	if n.Status != "succeeded" || len(n.Attempts) != 2 || n.Attempts[0].Status != "failed" || !n.Attempts[0].WillRetry ||
		*n.Attempts[0].ExitCode != 1 || n.Attempts[1].Status != "succeeded" || *n.Attempts[1].ExitCode != 0 {
		t.Errorf("node %+v", n)
	}
	// No log lines were read: the failed attempt's tail stands in.
	if len(n.Output) != 1 || n.Output[0].Text != "boom" || n.Output[0].Stream != "stderr" {
		t.Errorf("output %+v", n.Output)
	}
}

func TestModelLinesReplaceTails(t *testing.T) {
	m := webview.NewModel(wfID)
	ok := &events.NodeEvent{Ref: ref("base", "h1", "a"), Status: dag.NodeSucceeded, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t0}, StdoutTail: "x\ny\n"}
	apply(t, m, accepted(t), env(t, ok))
	if out := nodeOf(t, m, "base/a").Output; len(out) != 2 {
		t.Fatalf("tails: %+v", out)
	}
	p := apply(t, m, webview.Item{Line: &events.LogLine{Ref: ref("base", "h1", "a"), Attempt: 1, Stream: events.Stdout, Line: "x"}})
	if len(p.Nodes) != 1 || len(p.Nodes[0].Output) != 1 {
		t.Errorf("a line after tails should replace them in a node patch: %+v", p)
	}
	// A node whose lines were read keeps them over its event's tails.
	m = webview.NewModel(wfID)
	apply(t, m, accepted(t), webview.Item{Line: &events.LogLine{Ref: ref("base", "h1", "a"), Attempt: 1, Stream: events.Stdout, Line: "only"}}, env(t, ok))
	if out := nodeOf(t, m, "base/a").Output; len(out) != 1 || out[0].Text != "only" {
		t.Errorf("lines then tails: %+v", out)
	}
}

func TestModelOutputBounded(t *testing.T) {
	m := webview.NewModel(wfID)
	apply(t, m, accepted(t))
	for i := range webview.MaxOutputLines + 50 {
		apply(t, m, webview.Item{Line: &events.LogLine{Ref: ref("base", "h1", "a"), Attempt: 1, Stream: events.Stdout, Seq: int64(i), Line: strings.Repeat("z", 5000)}})
	}
	out := nodeOf(t, m, "base/a").Output
	if len(out) != webview.MaxOutputLines || len([]rune(out[0].Text)) > 1001 {
		t.Errorf("%d lines, first %d runes", len(out), len([]rune(out[0].Text)))
	}
}

func TestModelOlderGenerationIgnored(t *testing.T) {
	m := webview.NewModel(wfID)
	gen2 := ref("base", "h1", "a")
	gen2.Generation = 2
	late := ref("base", "h1", "a") // a generation-1 event delivered late
	apply(t, m, accepted(t), env(t, &events.NodeEvent{Ref: gen2, Status: dag.NodeRunning, Run: events.Run{Attempt: 2, StartedAt: &t0}}),
		env(t, &events.NodeEvent{Ref: late, Status: dag.NodeFailed, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t0}}))
	if n := nodeOf(t, m, "base/a"); n.Status != "running" || len(n.Attempts) != 2 || n.Attempts[0].Status != "failed" {
		t.Errorf("a late event of run 1 overwrote run 2, or its attempt is missing: %+v", n)
	}
}

// A retried workflow loaded late: the document is of run 2, the stream
// replays run 1 first. The plan's shape and run 1's attempts still count.
func TestModelRetriedLateLoad(t *testing.T) {
	m := webview.NewModel(wfID)
	m.Seed(&webview.Doc{WorkflowDoc: events.WorkflowDoc{WorkflowID: wfID, Workflow: "demo", Status: dag.WorkflowSucceeded, Generation: 2, CreatedAt: t0},
		Formulas: map[string]*webview.DocFormula{"base": {FormulaDoc: events.FormulaDoc{Host: "h1", Status: dag.FormulaHealthy, Generation: 2},
			Nodes: map[string]*webview.DocNode{"a": {NodeDoc: events.NodeDoc{Status: dag.NodeSucceeded, LastAttempt: 2, Generation: 2}}}}}})
	one := 1
	apply(t, m, accepted(t), env(t, &events.NodeEvent{Ref: ref("base", "h1", "a"), Status: dag.NodeFailed, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t0, ExitCode: &one}}))
	s := m.Snapshot()
	if !s.Header.Graph || s.Header.Status != "succeeded" || len(s.Formulas) != 3 {
		t.Errorf("header %+v, %d formulas", s.Header, len(s.Formulas))
	}
	if n := nodeOf(t, m, "base/a"); n.Status != "succeeded" || len(n.Attempts) != 2 || n.Attempts[0].Status != "failed" {
		t.Errorf("node %+v", n)
	}
}

func TestModelProgress(t *testing.T) {
	m := webview.NewModel(wfID)
	apply(t, m, accepted(t), node(t, "base", "a", dag.NodeRunning, 1))
	for i, c := range []struct {
		data string
		want int
	}{
		{`{"workflow_id":"` + wfID + `","formula":"base","node":"a","host":"h1","generation":1,"attempt":1,"percent":40}`, 40},
		{`{"workflow_id":"` + wfID + `","formula":"base","node":"a","host":"h1","generation":1,"attempt":1,"percent":140}`, 40}, // out of range: ignored
		{`{"workflow_id":"` + wfID + `","formula":"base","node":"a","host":"h1","generation":1,"attempt":1,"percent":75}`, 75},
	} {
		e := &events.Envelope{SpecVersion: events.SpecVersion, ID: "p" + strconv.Itoa(i), Source: "executor/1", Type: webview.TypeProgress, Subject: wfID + "/base/a", Data: json.RawMessage(c.data)}
		m.ApplyEvent(e)
		if n := nodeOf(t, m, "base/a"); n.Progress == nil || *n.Progress != c.want {
			t.Errorf("after %s: progress %v, want %d", c.data, n.Progress, c.want)
		}
	}
}

func TestModelWithoutGraph(t *testing.T) {
	// Events alone (no accepted event in the stream any more, no
	// document): formulas and nodes appear as events name them.
	m := webview.NewModel(wfID)
	apply(t, m, env(t, &events.FormulaEvent{Ref: ref("x", "h9", ""), Status: dag.FormulaRunning, Run: events.Run{StartedAt: &t0}}),
		node(t, "x", "n2", dag.NodeRunning, 1))
	s := m.Snapshot()
	if s.Header.Graph || len(s.Formulas) != 1 || s.Formulas[0].Host != "h9" || len(s.Nodes) != 1 || s.Nodes[0].Status != "running" {
		t.Errorf("%+v", s)
	}
}

func TestModelHealthGates(t *testing.T) {
	m := webview.NewModel(wfID)
	one, zero := 1, 0
	apply(t, m, accepted(t),
		env(t, &events.HealthEvent{Ref: ref("base", "h1", ""), Status: events.HealthFail, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t0, ExitCode: &one}, Retries: 3, OutputTail: "inactive"}),
		env(t, &events.HealthEvent{Ref: ref("base", "h1", ""), Status: events.HealthPass, Run: events.Run{Attempt: 2, StartedAt: &t0, EndedAt: &t0, ExitCode: &zero}, Retries: 3}),
		env(t, &events.HealthEvent{Ref: ref("base", "h1", ""), Status: events.HealthPass, Run: events.Run{Attempt: 2, StartedAt: &t0, EndedAt: &t0, ExitCode: &zero}, Retries: 3, Final: true}))
	f := m.Snapshot().Formulas[0]
	if len(f.Gates) != 3 || f.Gates[0].Output != "inactive" || !f.Gates[2].Final {
		t.Errorf("gates %+v", f.Gates)
	}
}

// Events stored again after the run ended (the same ids), and a node's
// running of an attempt that has ended under an id of its own, move
// nothing back: the page shows what gantry status shows.
func TestModelStaleAndRepeatedEvents(t *testing.T) {
	m := webview.NewModel(wfID)
	wRunning := env(t, &events.WorkflowEvent{Ref: ref("", "", ""), Status: dag.WorkflowRunning})
	fRunning := env(t, &events.FormulaEvent{Ref: ref("base", "h1", ""), Status: dag.FormulaRunning, Run: events.Run{StartedAt: &t0}})
	aRunning := node(t, "base", "a", dag.NodeRunning, 1)
	apply(t, m, accepted(t), wRunning, fRunning, aRunning, node(t, "base", "a", dag.NodeSucceeded, 1),
		env(t, &events.FormulaEvent{Ref: ref("base", "h1", ""), Status: dag.FormulaSucceeded, Run: events.Run{EndedAt: &t0}}),
		env(t, &events.WorkflowEvent{Ref: ref("", "", ""), Status: dag.WorkflowSucceeded, Run: events.Run{EndedAt: &t0}}))
	for _, again := range []webview.Item{aRunning, fRunning, wRunning} {
		if p := apply(t, m, again); !p.Empty() {
			t.Errorf("an event stored again changed the page: %+v", p)
		}
	}
	apply(t, m, node(t, "base", "a", dag.NodeRunning, 1)) // a late running of attempt 1, an id of its own
	s := m.Snapshot()
	if s.Header.Status != "succeeded" {
		t.Errorf("workflow %s, want succeeded", s.Header.Status)
	}
	for _, f := range s.Formulas {
		if f.ID == "base" && f.Status != "succeeded" {
			t.Errorf("formula base %s, want succeeded", f.Status)
		}
	}
	if n := nodeOf(t, m, "base/a"); n.Status != "succeeded" || len(n.Attempts) != 1 || n.Attempts[0].Status != "succeeded" {
		t.Errorf("node %+v, attempts %+v; want succeeded after one attempt", n, n.Attempts)
	}
}

// A node's files, with their diffs, reach the page from its event; a
// later attempt's running keeps them until its own end says otherwise.
func TestModelFiles(t *testing.T) {
	m := webview.NewModel(wfID)
	files := []events.FileResult{{Path: "/etc/app.conf", Status: events.FileChanged, Differs: []string{"content"}, Diff: "-a\n+b\n"}}
	ev := &events.NodeEvent{Ref: ref("base", "h1", "a"), Status: dag.NodeSucceeded, Check: events.CheckWouldChange, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t0}, Files: files}
	apply(t, m, accepted(t), node(t, "base", "a", dag.NodeRunning, 1), env(t, ev))
	n := nodeOf(t, m, "base/a")
	if len(n.Files) != 1 || n.Files[0].Diff != "-a\n+b\n" || n.Files[0].Status != events.FileChanged {
		t.Fatalf("files %+v", n.Files)
	}
	b, _ := json.Marshal(m.Snapshot())
	if !strings.Contains(string(b), `"files":[{"path":"/etc/app.conf","status":"changed","differs":["content"],"diff":"-a\n+b\n"}]`) {
		t.Errorf("the page's snapshot does not carry the files: %s", b)
	}
}
