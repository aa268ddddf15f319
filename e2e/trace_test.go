package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The submitter's trace (TRACEPARENT, as a CI job would set it) runs from
// gantry submit through the planner, the dispatches, the executor, the
// gate request and the health-gate: one trace, workflow -> formula ->
// node -> attempt, and the gate under its formula; every dispatch, gate
// request and event carries it in its traceparent header. The services
// run in process, each with its own provider (its service.name) on one
// in-memory exporter; the CLI is the real binary.
func TestTraceOfAWorkflow(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tracers := map[string]*tracing.Tracer{}
	for _, svc := range []string{"gantry-planner", "gantry-executor", "gantry-health-gate"} {
		tp, err := tracing.NewProvider(context.Background(), svc, buildinfo.Version(), exp, false)
		if err != nil {
			t.Fatal(err)
		}
		tracers[svc] = tracing.New(tp)
	}
	s := newStack(t, stackOptions{hosts: 2, tracer: func(svc string) *tracing.Tracer { return tracers[svc] }})
	headers := s.watchHeaders("decky.*.dispatch.>", "decky.*.gate", "decky.*.lifecycle", "workflow.*.lifecycle")

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	h1, h2 := s.fleet.Hosts[0], s.fleet.Hosts[1]
	doc := fmt.Sprintf(`name: traced
hosts:
  h1: {address: %q, user: %s}
  h2: {address: %q, user: %s}
retry: {max_attempts: 2, initial_interval: 100ms}
formulas:
  - id: base
    server: h1
    nodes:
      - {name: dir, run: 'mkdir -p %[5]s/t'}
      - {name: flaky, depends_on: [dir], run: 'test -f %[5]s/t/once || { touch %[5]s/t/once; exit 3; }', env: {API_TOKEN: sekrit-value-123}}
    health_gate: {check: 'test -f %[5]s/t/once', timeout: 5s, retries: 2}
  - id: app
    server: h2
    depends_on: [base]
    nodes: [{name: conf, run: 'echo ok > %[6]s/app.conf'}]
`, h1.Addr, s.fleet.User, h2.Addr, s.fleet.User, h1.Dir, h2.Dir)
	file := filepath.Join(t.TempDir(), "traced.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := buildGantry(t)
	cmd := exec.Command(bin, "submit", "-q", file, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))
	cmd.Env = append(os.Environ(), "TRACEPARENT=00-"+traceID+"-"+parentID+"-01", "TRACESTATE=ci=job-7", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	if d := s.wait(id, 90*time.Second); d.Status != "succeeded" {
		t.Fatalf("workflow %s: %s", id, d.Status)
	}

	spans := exp.GetSpans()
	t.Logf("span tree of workflow %s:\n%s", id, spanTree(spans))
	byName := map[string]tracetest.SpanStub{}
	for _, sp := range spans {
		if got := sp.SpanContext.TraceID().String(); got != traceID {
			t.Errorf("span %q in trace %s, want the submitter's %s", sp.Name, got, traceID)
		}
		if !slices.Contains([]string{"workflow", "formula", "node", "attempt", "gate"}, sp.Name) {
			t.Errorf("span %q: a span's name is its kind; what it is about goes in its attributes", sp.Name)
		}
		label := spanLabel(sp)
		if _, dup := byName[label]; dup && sp.Name != "attempt" {
			t.Errorf("span %q recorded twice", label)
		}
		byName[label] = sp
		for _, a := range sp.Attributes {
			if v := a.Value.Emit(); strings.Contains(v, "sekrit") || strings.Contains(v, "touch") || strings.Contains(v, "mkdir") {
				t.Errorf("span %q attribute %s = %q: commands and env are not span attributes", sp.Name, a.Key, v)
			}
		}
	}
	want := []struct{ name, parent, service string }{
		{"workflow traced", "", "gantry-planner"},
		{"formula base", "workflow traced", "gantry-planner"},
		{"formula app", "workflow traced", "gantry-planner"},
		{"node dir", "formula base", "gantry-executor"},
		{"node flaky", "formula base", "gantry-executor"},
		{"node conf", "formula app", "gantry-executor"},
		{"attempt 2", "node flaky", "gantry-executor"},
		{"gate base", "formula base", "gantry-health-gate"},
	}
	for _, w := range want {
		sp, ok := byName[w.name]
		if !ok {
			t.Errorf("no span %q", w.name)
			continue
		}
		parent := parentID
		if w.parent != "" {
			parent = byName[w.parent].SpanContext.SpanID().String()
		}
		if got := sp.Parent.SpanID().String(); got != parent {
			t.Errorf("span %q has parent %s, want %s (%s)", w.name, got, parent, w.parent)
		}
		if svc, _ := sp.Resource.Set().Value("service.name"); svc.AsString() != w.service {
			t.Errorf("span %q from %q, want %q", w.name, svc.AsString(), w.service)
		}
	}
	// The flaky node's two attempts, the first failed with its exit code
	// (every node has an "attempt 1").
	var attempts []tracetest.SpanStub
	for _, sp := range spans {
		if sp.Parent.SpanID() == byName["node flaky"].SpanContext.SpanID() {
			attempts = append(attempts, sp)
		}
	}
	slices.SortFunc(attempts, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	if n := len(spans); n != 11 {
		t.Errorf("%d spans, want 11: the workflow, 2 formulas, 3 nodes, 4 attempts, the gate", n)
	}
	if len(attempts) != 2 || attrOf(attempts[0], "gantry.exit_code") != "3" || attempts[0].Status.Code != codes.Error ||
		attrOf(attempts[0], "gantry.will_retry") != "true" || attrOf(attempts[1], "gantry.exit_code") != "0" || attempts[1].Status.Code == codes.Error ||
		attrOf(attempts[1], "gantry.attempt") != "2" || attrOf(attempts[1], "gantry.host") != "h1" {
		t.Errorf("attempts of flaky: %v", attempts)
	}
	if g := byName["gate base"]; len(g.Events) == 0 || attrOf(g, "gantry.status") != "pass" {
		t.Errorf("gate span: status %q, %d checks", attrOf(g, "gantry.status"), len(g.Events))
	}
	if w := byName["workflow traced"]; attrOf(w, "gantry.workflow_id") != id || w.SpanContext.TraceState().Get("ci") != "job-7" {
		t.Errorf("workflow span: %v", w)
	}
	// Every dispatch, gate request and event carried the trace.
	seen := headers()
	for _, subj := range []string{"dispatch", "gate", "decky-lifecycle", "workflow-lifecycle"} {
		tps := seen[subj]
		if len(tps) == 0 {
			t.Errorf("no %s message seen", subj)
		}
		for _, tp := range tps {
			if !strings.HasPrefix(tp, "00-"+traceID+"-") {
				t.Errorf("%s message with traceparent %q", subj, tp)
			}
		}
	}
}

// watchHeaders subscribes to subjects (as the administrator) and returns
// a function giving the traceparent headers seen so far, by kind of
// subject (the dispatches and gate requests are work-queue messages,
// gone from their streams once done).
func (s *stack) watchHeaders(subjects ...string) func() map[string][]string {
	nc := s.ns.Connect(busauth.Admin)
	var mu sync.Mutex
	seen := map[string][]string{}
	for _, subj := range subjects {
		_, err := nc.Subscribe(subj, func(m *nats.Msg) {
			kind := "workflow-lifecycle"
			switch {
			case strings.Contains(m.Subject, ".dispatch."):
				kind = "dispatch"
			case strings.HasSuffix(m.Subject, ".gate"):
				kind = "gate"
			case strings.HasPrefix(m.Subject, "decky."):
				kind = "decky-lifecycle"
			}
			mu.Lock()
			defer mu.Unlock()
			seen[kind] = append(seen[kind], m.Header.Get(events.TraceParentHeader))
		})
		if err != nil {
			s.t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		s.t.Fatal(err)
	}
	return func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

func attrOf(sp tracetest.SpanStub, key string) string {
	for _, a := range sp.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// spanTree prints spans indented under their parents, in start order.
func spanTree(spans tracetest.SpanStubs) string {
	children := map[string][]tracetest.SpanStub{}
	ids := map[string]bool{}
	for _, sp := range spans {
		ids[sp.SpanContext.SpanID().String()] = true
	}
	for _, sp := range spans {
		p := sp.Parent.SpanID().String()
		if !ids[p] {
			p = "" // a root here (its parent is the submitter's)
		}
		children[p] = append(children[p], sp)
	}
	var b strings.Builder
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		kids := children[parent]
		slices.SortFunc(kids, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
		for _, sp := range kids {
			svc, _ := sp.Resource.Set().Value("service.name")
			fmt.Fprintf(&b, "%s%s  [%s] %s %s", strings.Repeat("  ", depth), sp.Name, svc.AsString(), sp.EndTime.Sub(sp.StartTime).Round(time.Millisecond), sp.SpanContext.SpanID())
			for _, k := range []string{"gantry.host", "gantry.status", "gantry.attempt", "gantry.exit_code"} {
				if v := attrOf(sp, k); v != "" {
					fmt.Fprintf(&b, " %s=%s", strings.TrimPrefix(k, "gantry."), v)
				}
			}
			if sp.Status.Code == codes.Error {
				fmt.Fprintf(&b, " ERROR(%s)", sp.Status.Description)
			}
			if len(sp.Events) > 0 {
				fmt.Fprintf(&b, " checks=%d", len(sp.Events))
			}
			b.WriteString("\n")
			walk(sp.SpanContext.SpanID().String(), depth+1)
		}
	}
	walk("", 0)
	return b.String()
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, gantry submit records its own
// span at that collector (over OTLP/HTTP), and the workflow's span is its
// child: the trace starts at the CLI.
func TestSubmitSpanIsTheWorkflowsParent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider(context.Background(), "gantry-planner", buildinfo.Version(), exp, false)
	if err != nil {
		t.Fatal(err)
	}
	planner := tracing.New(tp)
	s := newStack(t, stackOptions{tracer: func(svc string) *tracing.Tracer {
		if svc == "gantry-planner" {
			return planner
		}
		return nil
	}})
	var mu sync.Mutex
	var cli []*tracepb.Span
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectorpb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				cli = append(cli, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	file := filepath.Join(t.TempDir(), "one.yaml")
	os.WriteFile(file, []byte("name: one\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'true'}]\n"), 0o644)
	cmd := exec.Command(buildGantry(t), "submit", "-q", file, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "TRACEPARENT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	s.wait(id, 60*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(cli) != 1 || cli[0].Name != "gantry submit" {
		t.Fatalf("the collector got %v, want the CLI's submit span", cli)
	}
	var wf *tracetest.SpanStub
	for _, sp := range exp.GetSpans() {
		if spanLabel(sp) == "workflow one" {
			wf = &sp
		}
	}
	if wf == nil {
		t.Fatal("no workflow span")
	}
	if tid := wf.SpanContext.TraceID(); !bytes.Equal(tid[:], cli[0].TraceId) {
		t.Errorf("workflow in trace %s, submit in %x", tid, cli[0].TraceId)
	}
	if pid := wf.Parent.SpanID(); !bytes.Equal(pid[:], cli[0].SpanId) {
		t.Errorf("workflow span's parent %s, want the submit span %x", pid, cli[0].SpanId)
	}
}

// spanLabel tells a span from the others of its kind: its name and the
// attribute that says what it is about ("formula base", "attempt 2").
func spanLabel(sp tracetest.SpanStub) string {
	key := map[string]string{"workflow": "gantry.workflow", "formula": "gantry.formula", "node": "gantry.node", "attempt": "gantry.attempt", "gate": "gantry.formula"}[sp.Name]
	return sp.Name + " " + attrOf(sp, key)
}
