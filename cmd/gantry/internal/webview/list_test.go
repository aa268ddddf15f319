package webview_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
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

// TestListStreamEndsOnAProblem: when the events cannot be read, the list
// stream says so and ends (the browser reconnects, and a new stream has
// a new snapshot).
func TestListStreamEndsOnAProblem(t *testing.T) {
	src := &memSource{lifecycle: make(chan webview.Item), lifecycleErr: make(chan error, 1)}
	srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
	defer srv.Close()
	s, done := open(t, srv, "/api/workflows/events")
	defer done()
	if ev, data := s.next(t); ev != "snapshot" || data != "[]" {
		t.Fatalf("first: %s %s", ev, data)
	}
	src.lifecycleErr <- errors.New("read GANTRY_EVENTS: connection closed")
	if ev, data := s.next(t); ev != "problem" || !strings.Contains(data, "connection closed") {
		t.Fatalf("problem: %s %s", ev, data)
	}
	if s.sc.Scan() {
		t.Fatalf("the stream goes on after a problem: %q", s.sc.Text())
	}
	src.rows = []events.WorkflowSummary{{WorkflowID: otherID, Status: dag.WorkflowSucceeded, CreatedAt: t0}}
	s2, done2 := open(t, srv, "/api/workflows/events")
	defer done2()
	if ev, data := s2.next(t); ev != "snapshot" || !strings.Contains(data, otherID) {
		t.Fatalf("after a reconnect: %s %s", ev, data)
	}
}

// TestListStreamRetryOfAnOlderRun: a workflow beyond the list's rows that
// runs again comes back with its state-store row (start, submitter).
func TestListStreamRetryOfAnOlderRun(t *testing.T) {
	doc := &webview.Doc{WorkflowDoc: events.WorkflowDoc{WorkflowID: wfID, Workflow: "demo", Operation: dag.OpCreate, Status: dag.WorkflowFailed,
		CreatedAt: t0, UpdatedAt: t0.Add(time.Minute), FormulaCount: 3, NodeCount: 9, SubmittedBy: &events.Principal{Name: "carol", Attested: true}}}
	src := &memSource{lifecycle: make(chan webview.Item), doc: doc}
	srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
	defer srv.Close()
	s, done := open(t, srv, "/api/workflows/events")
	defer done()
	if ev, _ := s.next(t); ev != "snapshot" {
		t.Fatalf("first: %s", ev)
	}
	at := t0.Add(time.Hour)
	src.lifecycle <- wfEvent(t, wfID, dag.WorkflowRunning, at)
	ev, data := s.next(t)
	r := rowOf(t, data)
	if ev != "row" || r.Status != dag.WorkflowRunning || !r.CreatedAt.Equal(t0) || r.SubmittedBy == nil || r.SubmittedBy.Name != "carol" ||
		r.Formulas != 3 || r.Nodes != 9 || r.EndedAt != nil {
		t.Fatalf("retried run: %s %s", ev, data)
	}
}

// TestListStreamOfAClientThatDoesNotRead: a list page whose client never
// reads loses its stream, and its slot, once a write has waited
// WriteTimeout.
func TestListStreamOfAClientThatDoesNotRead(t *testing.T) {
	src := &memSource{lifecycle: make(chan webview.Item)}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a workflow changing state, as fast as the page takes it
		for i := 1; ; i++ {
			e := &events.WorkflowEvent{Ref: events.Ref{WorkflowID: otherID, Workflow: "demo", Operation: dag.OpCreate, Generation: 1}, Status: dag.WorkflowRunning}
			env, err := events.NewAt("00000000-0000-4000-8000-000000000003", "test/1", t0.Add(time.Duration(i)*time.Millisecond), e)
			if err != nil {
				return
			}
			b, _ := json.Marshal(env)
			parsed, err := events.Parse(b)
			if err != nil {
				return
			}
			select {
			case src.lifecycle <- webview.Item{Event: parsed}:
			case <-stop:
				return
			}
		}
	}()
	srv := httptest.NewServer((&webview.Server{Src: src, MaxStreams: 1, WriteTimeout: 200 * time.Millisecond}).Handler())
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprint(conn, "GET /api/workflows/events HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/api/workflows/" + wfID + "/events?probe")
		code := 0
		if err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		if code != http.StatusServiceUnavailable && code != 0 {
			return // the slot is free (the probe's workflow is missing: 200 then "missing")
		}
		if time.Now().After(deadline) {
			t.Fatalf("a list client that does not read still holds the only slot after 20s: %d %v", code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestListModelKeepsTheNewest: the list keeps its limit of rows, the
// newest; a change to a run older than all of them is not news.
func TestListModelKeepsTheNewest(t *testing.T) {
	m := webview.NewListModel(1)
	m.Seed([]events.WorkflowSummary{{WorkflowID: wfID, Status: dag.WorkflowSucceeded, CreatedAt: t0, UpdatedAt: t0}})
	m.Add(events.WorkflowSummary{WorkflowID: otherID, Status: dag.WorkflowFailed, CreatedAt: t0.Add(-time.Hour), UpdatedAt: t0.Add(-time.Hour)})
	if r := m.Apply(wfEvent(t, otherID, dag.WorkflowRunning, t0.Add(time.Hour)).Event); r != nil {
		t.Errorf("a change to a run older than the list: %+v", r)
	}
	if rows := m.Rows(); len(rows) != 1 || rows[0].WorkflowID != wfID {
		t.Errorf("rows: %+v", rows)
	}
	const newer = "2d7e5c74-6a2e-4e73-9f2a-9c6f4a1b0c33"
	if r := m.Apply(wfEvent(t, newer, dag.WorkflowAccepted, t0.Add(time.Hour)).Event); r == nil || r.WorkflowID != newer {
		t.Fatalf("a new run: %+v", r)
	}
	if rows := m.Rows(); len(rows) != 1 || rows[0].WorkflowID != newer {
		t.Errorf("rows after a new run: %+v", rows)
	}
}

// A running stored after its workflow ended (an event of its own, later
// in time) leaves the row ended.
func TestListKeepsAnEndedRow(t *testing.T) {
	m := webview.NewListModel(10)
	m.Apply(wfEvent(t, wfID, dag.WorkflowAccepted, t0).Event)
	m.Apply(wfEvent(t, wfID, dag.WorkflowSucceeded, t0.Add(time.Second)).Event)
	if row := m.Apply(wfEvent(t, wfID, dag.WorkflowRunning, t0.Add(2*time.Second)).Event); row != nil {
		t.Errorf("a running after the end changed the row: %+v", row)
	}
	if rows := m.Rows(); len(rows) != 1 || rows[0].Status != dag.WorkflowSucceeded {
		t.Errorf("rows %+v", rows)
	}
}
