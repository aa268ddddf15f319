package webview_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

const otherID = "1c6d4b63-5f1d-4d62-8e1f-8b5e3f0a9b22"

func wfEvent(t *testing.T, id string, st dag.WorkflowState, at time.Time) webview.Item {
	t.Helper()
	e := &events.WorkflowEvent{Ref: events.Ref{WorkflowID: id, Workflow: "demo", Operation: dag.OpCreate, Generation: 1}, Status: st}
	if st == dag.WorkflowAccepted {
		e.RequestedBy = &events.Principal{Account: events.AccountClients, User: "UBOB", Name: "bob", Attested: true}
		e.Formulas, e.TotalNodes = map[events.FormulaState]int{"pending": 2}, 5
	}
	if st.Terminal() {
		e.EndedAt = &at
	}
	env, err := events.NewAt("00000000-0000-4000-8000-000000000002", "test/1", at, e)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	parsed, err := events.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return webview.Item{Event: parsed}
}

func rowOf(t *testing.T, data string) events.WorkflowSummary {
	t.Helper()
	var r events.WorkflowSummary
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		t.Fatalf("row %s: %v", data, err)
	}
	return r
}

// TestListStreamSnapshotThenChanges: the list page gets state.list's rows,
// then a row for a workflow that starts and for each change of its state.
func TestListStreamSnapshotThenChanges(t *testing.T) {
	src := &memSource{lifecycle: make(chan webview.Item), rows: []events.WorkflowSummary{
		{WorkflowID: wfID, Workflow: "old", Operation: dag.OpCreate, Status: dag.WorkflowSucceeded, CreatedAt: t0, UpdatedAt: t0.Add(time.Minute), EndedAt: ptr(t0.Add(time.Minute))},
	}}
	srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
	defer srv.Close()
	s, done := open(t, srv, "/api/workflows/events")
	defer done()
	ev, data := s.next(t)
	var rows []events.WorkflowSummary
	if ev != "snapshot" || json.Unmarshal([]byte(data), &rows) != nil || len(rows) != 1 || rows[0].WorkflowID != wfID || rows[0].Status != dag.WorkflowSucceeded {
		t.Fatalf("first: %s %s", ev, data)
	}
	t1 := t0.Add(time.Hour)
	// An event older than the row (already in state.list) changes nothing.
	src.lifecycle <- wfEvent(t, wfID, dag.WorkflowRunning, t0.Add(time.Second))
	src.lifecycle <- wfEvent(t, otherID, dag.WorkflowAccepted, t1)
	ev, data = s.next(t)
	r := rowOf(t, data)
	if ev != "row" || r.WorkflowID != otherID || r.Status != dag.WorkflowAccepted || !r.CreatedAt.Equal(t1) ||
		r.SubmittedBy == nil || r.SubmittedBy.Name != "bob" || r.Formulas != 2 || r.Nodes != 5 || r.EndedAt != nil {
		t.Fatalf("new workflow: %s %s", ev, data)
	}
	src.lifecycle <- wfEvent(t, otherID, dag.WorkflowRunning, t1.Add(time.Second))
	if ev, data = s.next(t); ev != "row" || rowOf(t, data).Status != dag.WorkflowRunning {
		t.Fatalf("running: %s %s", ev, data)
	}
	end := t1.Add(2 * time.Second)
	src.lifecycle <- wfEvent(t, otherID, dag.WorkflowSucceeded, end)
	ev, data = s.next(t)
	r = rowOf(t, data)
	if ev != "row" || r.Status != dag.WorkflowSucceeded || r.EndedAt == nil || !r.EndedAt.Equal(end) || r.SubmittedBy == nil || !r.CreatedAt.Equal(t1) {
		t.Fatalf("succeeded: %s %s", ev, data)
	}
}

func ptr[T any](v T) *T { return &v }

// TestListStreamBounded: list pages share MaxStreams with workflow pages.
func TestListStreamBounded(t *testing.T) {
	src := &memSource{lifecycle: make(chan webview.Item), live: make(chan webview.Item), history: []webview.Item{accepted(t)}}
	srv := httptest.NewServer((&webview.Server{Src: src, MaxStreams: 1}).Handler())
	defer srv.Close()
	s, done := open(t, srv, "/api/workflows/events")
	defer done()
	if ev, _ := s.next(t); ev != "snapshot" {
		t.Fatalf("first: %s", ev)
	}
	for _, path := range []string{"/api/workflows/events", "/api/workflows/" + wfID + "/events"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s over MaxStreams 1: %s", path, resp.Status)
		}
	}
	resp, err := http.Post(srv.URL+"/api/workflows/events", "text/plain", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %s", resp.Status)
	}
}
