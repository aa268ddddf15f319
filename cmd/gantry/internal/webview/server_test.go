package webview_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
)

// memSource is the Source in memory: a document, a history, and a channel
// of live items.
type memSource struct {
	mu      sync.Mutex
	rows    []events.WorkflowSummary
	doc     *webview.Doc
	history []webview.Item
	live    chan webview.Item
	since   time.Time
	hosts   []string
	// lifecycle are the workflow lifecycle events Lifecycle sends;
	// lifecycleErr ends it with that error.
	lifecycle    chan webview.Item
	lifecycleErr chan error
	// hostNodes are state.host's nodes, by host; lines are the log
	// stream's output lines.
	hostNodes map[string][]events.HostNode
	lines     []events.LogLine
	// outputHeld, when set, holds each Output until it is closed.
	outputHeld chan struct{}
	// docs are more documents, by workflow id (setDoc).
	docs map[string]*webview.Doc
	// outputErr, when set, is what Output fails with.
	outputErr error
	asked     []webview.OutputQuery
}

// seen is what the last Follow was asked for.
func (s *memSource) seen() (time.Time, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.since, s.hosts
}

func (s *memSource) List(context.Context, int) ([]events.WorkflowSummary, error) { return s.rows, nil }

func (s *memSource) Workflow(_ context.Context, id string) (*webview.Doc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.docs[id]; d != nil {
		return d, nil
	}
	if s.doc == nil || s.doc.WorkflowID != id {
		return nil, webview.ErrNotFound
	}
	return s.doc, nil
}

func (s *memSource) Follow(ctx context.Context, id string, since time.Time, hosts []string, out chan<- webview.Item) error {
	s.mu.Lock()
	s.since, s.hosts = since, hosts
	s.mu.Unlock()
	for _, it := range append(s.history, webview.Item{CaughtUp: true}) {
		out <- it
	}
	for {
		select {
		case it := <-s.live:
			out <- it
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *memSource) Lifecycle(ctx context.Context, out chan<- webview.Item) error {
	out <- webview.Item{CaughtUp: true}
	for {
		select {
		case it := <-s.lifecycle:
			out <- it
		case err := <-s.lifecycleErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *memSource) setDoc(d *webview.Doc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.docs == nil {
		s.docs = map[string]*webview.Doc{}
	}
	s.docs[d.WorkflowID] = d
}

func (s *memSource) Host(_ context.Context, host string) ([]events.HostNode, error) {
	return s.hostNodes[host], nil
}

func (s *memSource) Output(_ context.Context, q webview.OutputQuery, each func(*events.LogLine) error) error {
	s.mu.Lock()
	s.asked = append(s.asked, q)
	s.mu.Unlock()
	if s.outputErr != nil {
		return s.outputErr
	}
	if s.outputHeld != nil {
		<-s.outputHeld
	}
	for i := range s.lines {
		l := &s.lines[i]
		if l.WorkflowID != q.WorkflowID || l.Formula != q.Formula || l.Node != q.Node || l.Host != q.Host {
			continue
		}
		if err := each(l); err != nil {
			return err
		}
	}
	return nil
}

const wfID = "0b5c3a52-4f0c-4c51-9d0e-7a4d2f9e8a11"

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// envs counts the events env made: each has an id of its own.
var envs atomic.Int64

func env(t *testing.T, p events.Payload) webview.Item {
	t.Helper()
	e, err := events.NewAt(fmt.Sprintf("00000000-0000-4000-8000-%012d", envs.Add(1)), "test/1", t0, p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(e)
	parsed, err := events.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return webview.Item{Event: parsed}
}

func ref(formula, host, node string) events.Ref {
	return events.Ref{WorkflowID: wfID, Workflow: "demo", Formula: formula, Host: host, Node: node, Operation: dag.OpCreate, Generation: 1}
}

func accepted(t *testing.T) webview.Item {
	return env(t, &events.WorkflowEvent{Ref: ref("", "", ""), Status: dag.WorkflowAccepted, Run: events.Run{Attempt: 1, StartedAt: &t0},
		RequestedBy: &events.Principal{Account: events.AccountClients, User: "UALICE", Name: "alice", Attested: true},
		Graph: &events.Graph{Formulas: []events.GraphFormula{
			{ID: "base", Host: "h1", Nodes: []events.GraphNode{{Name: "a"}, {Name: "b", DependsOn: []string{"a"}}}},
			{ID: "app-h1", Host: "h1", Of: "app", Batch: 1, Batches: 2, DependsOn: []dag.FormulaDep{{Formula: "base", Condition: dag.ConditionHealthy}}, Nodes: []events.GraphNode{{Name: "conf"}}},
			{ID: "app-h2", Host: "h2", Of: "app", Batch: 2, Batches: 2, DependsOn: []dag.FormulaDep{{Formula: "base", Condition: dag.ConditionHealthy}, {Formula: "app-h1", Condition: dag.ConditionRollout}}, Nodes: []events.GraphNode{{Name: "conf"}}},
		}}})
}

func node(t *testing.T, formula, name string, st dag.NodeState, attempt int) webview.Item {
	e := &events.NodeEvent{Ref: ref(formula, "h1", name), Status: st, Run: events.Run{Attempt: attempt, StartedAt: &t0}}
	if st != dag.NodeRunning {
		one := 0
		e.EndedAt, e.ExitCode = &t0, &one
	}
	return env(t, e)
}

// sse reads server-sent events from an open response.
type sse struct {
	sc *bufio.Scanner
}

func (s *sse) next(t *testing.T) (string, string) {
	t.Helper()
	var ev, data string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		case line == "" && ev != "":
			return ev, data
		}
	}
	t.Fatalf("stream ended: %v", s.sc.Err())
	return "", ""
}

func open(t *testing.T, srv *httptest.Server, path string) (*sse, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET %s: %s %s", path, resp.Status, resp.Header.Get("Content-Type"))
	}
	return &sse{sc: bufio.NewScanner(resp.Body)}, func() { cancel(); resp.Body.Close() }
}

func TestStreamSnapshotThenPatches(t *testing.T) {
	src := &memSource{live: make(chan webview.Item, 10), history: []webview.Item{}}
	src.history = append(src.history, accepted(t), node(t, "base", "a", dag.NodeRunning, 1),
		webview.Item{Line: &events.LogLine{Ref: ref("base", "h1", "a"), Attempt: 1, Stream: events.Stdout, Seq: 1, Line: "hello"}},
		node(t, "base", "a", dag.NodeSucceeded, 1))
	srv := httptest.NewServer((&webview.Server{Src: src, Lookback: time.Hour}).Handler())
	defer srv.Close()
	s, done := open(t, srv, "/api/workflows/"+wfID+"/events")
	defer done()

	ev, data := s.next(t)
	if ev != "snapshot" {
		t.Fatalf("first event %s, want snapshot", ev)
	}
	var snap webview.Snapshot
	if err := json.Unmarshal([]byte(data), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Header.Status != "accepted" || snap.Header.SubmittedBy != "alice" || !snap.Header.Graph {
		t.Errorf("header %+v", snap.Header)
	}
	if len(snap.Formulas) != 3 || snap.Formulas[1].Of != "app" || snap.Formulas[2].Batch != 2 {
		t.Errorf("formulas %+v", snap.Formulas)
	}
	if len(snap.Nodes) != 4 || snap.Nodes[0].Status != "succeeded" || snap.Nodes[1].Status != "pending" || len(snap.Nodes[0].Output) != 1 || snap.Nodes[0].Output[0].Text != "hello" {
		t.Errorf("nodes %+v", snap.Nodes)
	}
	if since, _ := src.seen(); since.After(time.Now().Add(-59 * time.Minute)) {
		t.Errorf("an unknown-to-the-state-store workflow is read from %v, want the lookback", since)
	}

	src.live <- node(t, "base", "b", dag.NodeRunning, 1)
	ev, data = s.next(t)
	if ev != "node" || !strings.Contains(data, `"name":"b"`) || !strings.Contains(data, `"status":"running"`) {
		t.Errorf("live node: %s %s", ev, data)
	}
	// the header follows with the summary that counts it
	if ev, data = s.next(t); ev != "workflow" || !strings.Contains(data, `"running":1`) || !strings.Contains(data, `"succeeded":1`) {
		t.Errorf("summary after the live node: %s %s", ev, data)
	}
	src.live <- webview.Item{Line: &events.LogLine{Ref: ref("base", "h1", "b"), Attempt: 1, Stream: events.Stderr, Seq: 1, Line: "<script>alert(1)</script>"}}
	ev, data = s.next(t)
	if ev != "line" || strings.Contains(data, "<script>") || !strings.Contains(data, `\u003cscript\u003e`) {
		t.Errorf("line: %s %s (want the markup escaped in JSON)", ev, data)
	}
	src.live <- env(t, &events.RolloutEvent{Ref: ref("app", "", ""), Status: events.RolloutBatchStarted, Batch: 1, Batches: 2, Instances: []string{"app-h1"}, At: &t0})
	if ev, data = s.next(t); ev != "rollout" || !strings.Contains(data, `"batch_started"`) {
		t.Errorf("rollout: %s %s", ev, data)
	}
	src.live <- env(t, &events.WorkflowEvent{Ref: ref("", "", ""), Status: dag.WorkflowSucceeded, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t0}})
	if ev, data = s.next(t); ev != "workflow" || !strings.Contains(data, `"status":"succeeded"`) {
		t.Errorf("workflow: %s %s", ev, data)
	}
}

func TestStreamSeedsFromStateStore(t *testing.T) {
	zero := 0
	doc := &webview.Doc{WorkflowDoc: events.WorkflowDoc{WorkflowID: wfID, Workflow: "demo", Operation: dag.OpCreate, Status: dag.WorkflowSucceeded, Generation: 1, CreatedAt: t0,
		SubmittedBy: &events.Principal{Account: "GANTRY_CLIENTS", User: "UBOB", Attested: true}},
		Formulas: map[string]*webview.DocFormula{"base": {FormulaDoc: events.FormulaDoc{Host: "h1", Status: dag.FormulaHealthy},
			Nodes: map[string]*webview.DocNode{"a": {NodeDoc: events.NodeDoc{Status: dag.NodeSucceeded, LastAttempt: 1, ExitCode: &zero, StartedAt: &t0, EndedAt: &t0}, Progress: &[]int{100}[0]}}}}}
	src := &memSource{doc: doc, live: make(chan webview.Item)}
	srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
	defer srv.Close()
	s, done := open(t, srv, "/api/workflows/"+wfID+"/events")
	defer done()
	ev, data := s.next(t)
	var snap webview.Snapshot
	if ev != "snapshot" || json.Unmarshal([]byte(data), &snap) != nil {
		t.Fatalf("%s %s", ev, data)
	}
	if snap.Header.Status != "succeeded" || snap.Header.SubmittedBy != "UBOB in GANTRY_CLIENTS" || len(snap.Nodes) != 1 ||
		snap.Nodes[0].Status != "succeeded" || snap.Nodes[0].Progress == nil || *snap.Nodes[0].Progress != 100 || len(snap.Nodes[0].Attempts) != 1 {
		t.Errorf("snapshot %s", data)
	}
	since, hosts := src.seen()
	if !since.Equal(t0.Add(-time.Second)) {
		t.Errorf("read from %v, want just before the workflow was created", since)
	}
	if len(hosts) != 1 || hosts[0] != "h1" {
		t.Errorf("hosts %v, want the document's [h1]", hosts)
	}
	doc.FormulaCount = 2 // one formula not yet in the document: every host is read
	s2, done2 := open(t, srv, "/api/workflows/"+wfID+"/events")
	defer done2()
	s2.next(t)
	if _, hosts := src.seen(); hosts != nil {
		t.Errorf("hosts %v of a document without every formula, want none", hosts)
	}
}

func TestStreamMissingWorkflow(t *testing.T) {
	srv := httptest.NewServer((&webview.Server{Src: &memSource{live: make(chan webview.Item)}}).Handler())
	defer srv.Close()
	s, done := open(t, srv, "/api/workflows/nope/events")
	defer done()
	if ev, data := s.next(t); ev != "missing" || !strings.Contains(data, "no workflow nope") {
		t.Errorf("%s %s", ev, data)
	}
}

func TestOnlyGET(t *testing.T) {
	src := &memSource{rows: []events.WorkflowSummary{{WorkflowID: wfID, Workflow: "demo", Status: dag.WorkflowRunning}}, live: make(chan webview.Item)}
	srv := httptest.NewServer((&webview.Server{Src: src, Metrics: metricsserve.Metrics()}).Handler())
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/", 200, `src="/static/app.js"`},
		{"GET", "/w/" + wfID, 200, `src="/static/app.js"`},
		{"GET", "/static/app.js", 200, "textContent"},
		{"GET", "/static/app.css", 200, "--running"},
		{"GET", "/api/workflows", 200, `"workflow":"demo"`},
		{"GET", "/api/workflows?limit=0", 400, "limit"},
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/metrics", 200, "gantry_webview_streams"},
		{"GET", "/metrics", 200, "gantry_build_info{"},
		{"GET", "/api/workflows/a.b/events", 400, "not a token"},
		{"GET", "/nothing", 404, ""},
		{"POST", "/api/workflows", 405, "GET only"},
		{"PUT", "/", 405, "GET only"},
		{"DELETE", "/api/workflows/" + wfID + "/events", 405, "GET only"},
		{"POST", "/metrics", 405, "GET only"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.body) {
			t.Errorf("%s %s: %d %.80q, want %d containing %q", c.method, c.path, resp.StatusCode, b, c.code, c.body)
		}
		if c.code == 200 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("%s %s: no content security policy", c.method, c.path)
		}
	}
}

// The page never parses what it shows as HTML: no innerHTML, no inline
// script or style, nothing from elsewhere.
func TestPageSetsTextOnly(t *testing.T) {
	srv := httptest.NewServer((&webview.Server{Src: &memSource{}}).Handler())
	defer srv.Close()
	for _, path := range []string{"/static/app.js", "/", "/static/app.css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "http://", "https://", "<script>", "style=\""} {
			if strings.Contains(string(b), bad) && !(bad == "http://" && strings.Contains(string(b), "http://www.w3.org/2000/svg")) {
				t.Errorf("%s contains %s", path, bad)
			}
		}
	}
}

func TestStreamsBounded(t *testing.T) {
	src := &memSource{live: make(chan webview.Item), history: []webview.Item{accepted(t)}}
	srv := httptest.NewServer((&webview.Server{Src: src, MaxStreams: 1}).Handler())
	defer srv.Close()
	s, done := open(t, srv, "/api/workflows/"+wfID+"/events")
	if ev, _ := s.next(t); ev != "snapshot" {
		t.Fatalf("first page: %s", ev)
	}
	resp, err := http.Get(srv.URL + "/api/workflows/" + wfID + "/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("second page over MaxStreams 1: %s", resp.Status)
	}
	done()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/api/workflows/" + wfID + "/events?probe")
		if err != nil {
			t.Fatal(err)
		}
		code := resp.StatusCode
		resp.Body.Close()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot of a closed page was not freed: %d", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLoopbackOnly(t *testing.T) {
	srv := httptest.NewServer((&webview.Server{Src: &memSource{}, LoopbackOnly: true}).Handler())
	defer srv.Close()
	for host, want := range map[string]int{"": 200, "localhost:8080": 200, "127.0.0.1": 200, "[::1]:80": 200, "evil.example:8080": 421, "10.0.0.1": 421} {
		req, _ := http.NewRequest("GET", srv.URL+"/healthz", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// TestStreamOfAClientThatDoesNotRead: a client that opens a workflow's
// page and never reads loses it once a write has waited WriteTimeout, and
// its slot is free again (it cannot hold the MaxStreams slots forever).
func TestStreamOfAClientThatDoesNotRead(t *testing.T) {
	src := &memSource{live: make(chan webview.Item), history: []webview.Item{accepted(t)}}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // output lines, as fast as the page takes them
		line := strings.Repeat("x", 900)
		for i := int64(1); ; i++ {
			select {
			case src.live <- webview.Item{Line: &events.LogLine{Ref: ref("base", "h1", "a"), Attempt: 1, Stream: events.Stdout, Seq: i, Line: line}}:
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
	if _, err := fmt.Fprintf(conn, "GET /api/workflows/%s/events HTTP/1.1\r\nHost: localhost\r\n\r\n", wfID); err != nil {
		t.Fatal(err)
	}
	// It never reads. The page's slot is freed once a write times out.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/workflows/"+wfID+"/events", nil)
		resp, err = http.DefaultClient.Do(req)
		code := 0
		if err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		cancel()
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a client that does not read still holds the only slot after 20s: %d %v", code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A web view whose process serves its metrics elsewhere (gantry dev
// --metrics) has no /metrics: one endpoint per process, or a Prometheus
// scraping both would count every series twice.
func TestNoMetricsWhenServedElsewhere(t *testing.T) {
	srv := httptest.NewServer((&webview.Server{Src: &memSource{live: make(chan webview.Item)}}).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics: %d, want 404", resp.StatusCode)
	}
}
