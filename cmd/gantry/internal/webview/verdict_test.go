package webview_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// checkDoc is a check run's document: its nodes in the given states, the
// checks found in them.
func checkDoc(id string, st dag.WorkflowState, nodes map[string]events.NodeDoc) *webview.Doc {
	d := &webview.Doc{WorkflowDoc: events.WorkflowDoc{WorkflowID: id, Workflow: "demo", Operation: dag.OpCheck, Status: st, Generation: 1, CreatedAt: t0, FormulaCount: 1},
		Formulas: map[string]*webview.DocFormula{"base": {FormulaDoc: events.FormulaDoc{Host: "h1", Status: dag.FormulaSucceeded}, Nodes: map[string]*webview.DocNode{}}}}
	for name, n := range nodes {
		d.Formulas["base"].Nodes[name] = &webview.DocNode{NodeDoc: n}
	}
	return d
}

var (
	wouldChange = events.NodeDoc{Status: dag.NodeSucceeded, Check: events.CheckWouldChange}
	checkOK     = events.NodeDoc{Status: dag.NodeSkipped, Check: events.CheckOK}
	running     = events.NodeDoc{Status: dag.NodeRunning}
)

func TestChanges(t *testing.T) {
	create := checkDoc(wfID, dag.WorkflowSucceeded, map[string]events.NodeDoc{"a": wouldChange})
	create.Operation = dag.OpCreate
	missing := checkDoc(wfID, dag.WorkflowSucceeded, map[string]events.NodeDoc{"a": wouldChange})
	missing.FormulaCount = 2
	for _, c := range []struct {
		name string
		doc  *webview.Doc
		n    int
		ok   bool
	}{
		{"two of three would change", checkDoc(wfID, dag.WorkflowSucceeded, map[string]events.NodeDoc{"a": wouldChange, "b": wouldChange, "c": checkOK}), 2, true},
		{"nothing would change", checkDoc(wfID, dag.WorkflowSucceeded, map[string]events.NodeDoc{"a": checkOK}), 0, true},
		{"still running", checkDoc(wfID, dag.WorkflowRunning, map[string]events.NodeDoc{"a": wouldChange}), 0, false},
		{"failed: no verdict", checkDoc(wfID, dag.WorkflowFailed, map[string]events.NodeDoc{"a": wouldChange}), 0, false},
		{"a node not applied yet", checkDoc(wfID, dag.WorkflowSucceeded, map[string]events.NodeDoc{"a": wouldChange, "b": running}), 0, false},
		{"a formula not applied yet", missing, 0, false},
		{"not a check", create, 0, false},
	} {
		if n, ok := webview.Changes(c.doc); n != c.n || ok != c.ok {
			t.Errorf("%s: Changes = %d, %v; want %d, %v", c.name, n, ok, c.n, c.ok)
		}
	}
}

func checkEvent(t *testing.T, id string, st dag.WorkflowState, at time.Time) webview.Item {
	t.Helper()
	e := &events.WorkflowEvent{Ref: events.Ref{WorkflowID: id, Workflow: "demo", Operation: dag.OpCheck, Generation: 1}, Status: st}
	if st.Terminal() {
		e.EndedAt = &at
	}
	return env(t, e)
}

func rowsOf(t *testing.T, data string) []webview.Row {
	t.Helper()
	var rows []webview.Row
	if err := json.Unmarshal([]byte(data), &rows); err != nil {
		t.Fatalf("rows %s: %v", data, err)
	}
	return rows
}

// The list marks a check run that found changes with how many nodes would
// change: in the snapshot, and for a run that ends while the page is
// open, once the state-store has applied its nodes.
func TestListCheckVerdicts(t *testing.T) {
	src := &memSource{lifecycle: make(chan webview.Item), rows: []events.WorkflowSummary{
		{WorkflowID: wfID, Workflow: "demo", Operation: dag.OpCheck, Status: dag.WorkflowSucceeded, CreatedAt: t0, UpdatedAt: t0.Add(time.Minute)},
	}}
	src.setDoc(checkDoc(wfID, dag.WorkflowSucceeded, map[string]events.NodeDoc{"a": wouldChange, "b": wouldChange, "c": checkOK}))
	srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
	defer srv.Close()

	_, body := get(t, srv.URL+"/api/workflows")
	if rows := rowsOf(t, body); len(rows) != 1 || rows[0].Changes == nil || *rows[0].Changes != 2 {
		t.Errorf("/api/workflows: %s, want the check run with 2 changes", body)
	}
	s, done := open(t, srv, "/api/workflows/events")
	defer done()
	ev, data := s.next(t)
	if rows := rowsOf(t, data); ev != "snapshot" || len(rows) != 1 || rows[0].Changes == nil || *rows[0].Changes != 2 {
		t.Fatalf("snapshot: %s %s", ev, data)
	}

	// A check run ends before the state-store has applied its nodes: its
	// row comes at once, without a verdict, then again with it.
	t1 := t0.Add(time.Hour)
	src.setDoc(checkDoc(otherID, dag.WorkflowSucceeded, map[string]events.NodeDoc{"a": running}))
	src.lifecycle <- checkEvent(t, otherID, dag.WorkflowRunning, t1)
	if ev, data := s.next(t); ev != "row" || rowsOf(t, "["+data+"]")[0].Changes != nil {
		t.Fatalf("running check: %s %s", ev, data)
	}
	src.lifecycle <- checkEvent(t, otherID, dag.WorkflowSucceeded, t1.Add(time.Second))
	if ev, data := s.next(t); ev != "row" || rowsOf(t, "["+data+"]")[0].Changes != nil || rowsOf(t, "["+data+"]")[0].Status != dag.WorkflowSucceeded {
		t.Fatalf("ended check, nodes not applied: %s %s", ev, data)
	}
	src.setDoc(checkDoc(otherID, dag.WorkflowSucceeded, map[string]events.NodeDoc{"a": wouldChange}))
	ev, data = s.next(t)
	if r := rowsOf(t, "["+data+"]")[0]; ev != "row" || r.WorkflowID != otherID || r.Changes == nil || *r.Changes != 1 {
		t.Fatalf("the verdict: %s %s", ev, data)
	}
}
