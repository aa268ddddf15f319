package webview_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// outputDoc is a workflow with formula base on h1 (nodes a, b).
func outputDoc() *webview.Doc {
	return &webview.Doc{WorkflowDoc: events.WorkflowDoc{WorkflowID: wfID, Workflow: "demo", Operation: dag.OpCreate, Status: dag.WorkflowRunning, Generation: 1, CreatedAt: t0},
		Formulas: map[string]*webview.DocFormula{"base": {FormulaDoc: events.FormulaDoc{Host: "h1", Status: dag.FormulaRunning},
			Nodes: map[string]*webview.DocNode{"a": {NodeDoc: events.NodeDoc{Status: dag.NodeRunning}}, "b": {NodeDoc: events.NodeDoc{Status: dag.NodePending}}}}}}
}

func logLine(formula, node string, attempt int, stream events.Stream, text string) events.LogLine {
	return events.LogLine{Ref: ref(formula, "h1", node), Attempt: attempt, Stream: stream, Line: text}
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// A node's whole output: only its lines, in order, as text/plain (markup
// stays characters), a header per attempt when there are several; one
// attempt; as an attachment; as JSON; bad requests named.
func TestOutput(t *testing.T) {
	other := logLine("base", "a", 1, events.Stdout, "of another workflow")
	other.WorkflowID = otherID
	src := &memSource{doc: outputDoc(), lines: []events.LogLine{
		logLine("base", "a", 1, events.Stdout, "first"),
		logLine("base", "b", 1, events.Stdout, "of node b"),
		other,
		logLine("base", "a", 1, events.Stderr, "<script>alert(1)</script> password=***"),
		logLine("base", "a", 2, events.Stdout, "second try"),
	}}
	srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
	defer srv.Close()
	base := srv.URL + "/api/workflows/" + wfID + "/output/base/a"

	resp, body := get(t, base)
	want := "==> attempt 1 <==\nfirst\n<script>alert(1)</script> password=***\n==> attempt 2 <==\nsecond try\n"
	if resp.StatusCode != 200 || body != want {
		t.Errorf("GET output: %s %q, want %q", resp.Status, body, want)
	}
	h := resp.Header
	if h.Get("Content-Type") != "text/plain; charset=utf-8" || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") || h.Get("Content-Disposition") != "" {
		t.Errorf("headers of the output: %v", h)
	}
	if len(src.asked) != 1 || src.asked[0].Host != "h1" || !src.asked[0].Since.Equal(t0.Add(-time.Second)) {
		t.Errorf("read %+v, want node base/a on h1 from just before the workflow was created", src.asked)
	}

	resp, body = get(t, base+"?attempt=2&download=1")
	if body != "second try\n" || resp.Header.Get("Content-Disposition") != `attachment; filename="`+wfID+`-base-a-attempt2.log"` {
		t.Errorf("attempt 2, download: %q %v", body, resp.Header)
	}

	resp, body = get(t, base+"?format=json")
	var reply webview.OutputReply
	if err := json.Unmarshal([]byte(body), &reply); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("json: %v %s", err, body)
	}
	if reply.Host != "h1" || len(reply.Lines) != 3 || reply.Lines[1].Stream != "stderr" || reply.Lines[1].Text != "<script>alert(1)</script> password=***" || reply.Cut {
		t.Errorf("json: %+v", reply)
	}

	for _, c := range []struct {
		path string
		code int
		body string
	}{
		{"/api/workflows/" + wfID + "/output/base/a?format=html", 400, `format "html": want text or json`},
		{"/api/workflows/" + wfID + "/output/base/a?attempt=0", 400, `attempt "0"`},
		{"/api/workflows/" + wfID + "/output/base/a?download=yes", 400, `download "yes"`},
		{"/api/workflows/" + wfID + "/output/base/A", 400, `node "A" is not a token`},
		{"/api/workflows/" + wfID + "/output/b.c/a", 400, `formula "b.c" is not a token`},
		{"/api/workflows/" + otherID + "/output/base/a", 404, "no workflow " + otherID},
		{"/api/workflows/" + wfID + "/output/app/a", 404, "has no formula app"},
		{"/api/workflows/" + wfID + "/output/base/c", 404, "has no node c"},
		{"/api/workflows/" + wfID + "/output/base/b", 200, "of node b\n"},
		{"/w/" + wfID + "/output/base/a", 200, `src="/static/app.js"`},
	} {
		resp, body := get(t, srv.URL+c.path)
		if resp.StatusCode != c.code || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %q, want %d with %q", c.path, resp.StatusCode, body, c.code, c.body)
		}
	}

	src.outputErr = errors.New("read GANTRY_LOGS: nats: timeout")
	if resp, body := get(t, base); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "GANTRY_LOGS") {
		t.Errorf("output when the stream cannot be read: %s %q", resp.Status, body)
	}
}

// Output past MaxOutputBytes is cut, and the reply says so.
func TestOutputCut(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	src := &memSource{doc: outputDoc()}
	for range webview.MaxOutputBytes>>20 + 2 {
		src.lines = append(src.lines, logLine("base", "a", 1, events.Stdout, big))
	}
	srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
	defer srv.Close()
	_, body := get(t, srv.URL+"/api/workflows/"+wfID+"/output/base/a")
	if len(body) > webview.MaxOutputBytes+100 || !strings.HasSuffix(body, "==> cut: the output goes on past 32 MiB <==\n") {
		t.Errorf("output of %d bytes ends %q", len(body), body[max(0, len(body)-80):])
	}
	_, body = get(t, srv.URL+"/api/workflows/"+wfID+"/output/base/a?format=json")
	var reply webview.OutputReply
	if err := json.Unmarshal([]byte(body), &reply); err != nil || !reply.Cut || len(reply.Lines) != webview.MaxOutputBytes>>20-1 {
		t.Errorf("json: cut %v, %d lines (%v)", reply.Cut, len(reply.Lines), err)
	}
}

// A host's page: state.host's nodes of that host, as JSON; a bad host
// name is refused, naming the rule.
func TestHost(t *testing.T) {
	end := t0.Add(time.Minute)
	src := &memSource{hostNodes: map[string][]events.HostNode{"web-1.example.com": {
		{Host: "web-1.example.com", Workflow: "demo", Formula: "base", Node: "a", Status: dag.NodeSucceeded, Operation: dag.OpCreate, WorkflowID: wfID, EndedAt: &end,
			InPlace: &events.InPlace{Status: dag.NodeSucceeded, SpecHash: "sha256:ab", WorkflowID: wfID, EndedAt: &end}},
	}}}
	srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
	defer srv.Close()
	resp, body := get(t, srv.URL+"/api/hosts/web-1.example.com")
	var nodes []events.HostNode
	if err := json.Unmarshal([]byte(body), &nodes); err != nil || resp.StatusCode != 200 || len(nodes) != 1 || nodes[0].InPlace == nil || nodes[0].Node != "a" {
		t.Errorf("host: %s %s (%v)", resp.Status, body, err)
	}
	if resp, body := get(t, srv.URL+"/api/hosts/db-9"); resp.StatusCode != 200 || strings.TrimSpace(body) != "[]" {
		t.Errorf("a host with nothing: %s %q, want []", resp.Status, body)
	}
	if resp, body := get(t, srv.URL+"/api/hosts/Web_1"); resp.StatusCode != 400 || !strings.Contains(body, "host name") {
		t.Errorf("a bad host name: %s %q", resp.Status, body)
	}
	if resp, body := get(t, srv.URL+"/h/web-1.example.com"); resp.StatusCode != 200 || !strings.Contains(body, `id="host-view"`) {
		t.Errorf("the host's page: %s", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/hosts/web-1.example.com", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST to a host: %v %v", resp, err)
	}
}
