package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestRecordBuildsTheTreeFromIDs(t *testing.T) {
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider(ctx, "gantry-test", "1.2.3", exp, false)
	if err != nil {
		t.Fatal(err)
	}
	tr := tracing.New(tp)
	tid := tracing.NewTraceID()
	root := tracing.SpanID(tid, "w1", "workflow")
	if root != tracing.SpanID(tid, "w1", "workflow") || root == tracing.SpanID(tid, "w1", "formula") || root == tracing.SpanID(tracing.NewTraceID(), "w1", "workflow") {
		t.Fatal("span ids are not derived from the trace id and parts alone")
	}
	if tracing.SpanID(tid, "ab", "c") == tracing.SpanID(tid, "a", "bc") {
		t.Fatal("parts run together")
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rootSC := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: root, TraceFlags: trace.FlagsSampled})
	child := tracing.SpanID(tid, "w1", "formula", "f1")
	// The child is recorded first, as it ends first, naming a parent not
	// recorded yet.
	tr.Record(ctx, tracing.Span{Name: "formula", Parent: rootSC, ID: child, Start: t0.Add(time.Second), End: t0.Add(2 * time.Second),
		Err: "node(s) failed: a", Events: []tracing.Event{{Name: "check", At: t0.Add(1500 * time.Millisecond)}}})
	tr.Record(ctx, tracing.Span{Name: "workflow", TraceID: tid, ID: root, Start: t0, End: t0.Add(3 * time.Second), Attrs: []attribute.KeyValue{attribute.String("gantry.workflow_id", "w1")}})
	tr.Record(ctx, tracing.Span{Name: "nothing to hang it on", Start: t0, End: t0}) // no parent, no trace id: dropped
	var nilTracer *tracing.Tracer
	nilTracer.Record(ctx, tracing.Span{Name: "disabled", TraceID: tid, Start: t0, End: t0})

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans recorded, want 2: %v", len(spans), spans)
	}
	f, w := spans[0], spans[1]
	if w.SpanContext.TraceID() != tid || w.SpanContext.SpanID() != root || w.Parent.IsValid() {
		t.Errorf("workflow span %v parent %v", w.SpanContext, w.Parent)
	}
	if f.SpanContext.TraceID() != tid || f.SpanContext.SpanID() != child || f.Parent.SpanID() != root {
		t.Errorf("formula span %v parent %v", f.SpanContext, f.Parent)
	}
	if !w.StartTime.Equal(t0) || !w.EndTime.Equal(t0.Add(3*time.Second)) {
		t.Errorf("workflow span times %v - %v", w.StartTime, w.EndTime)
	}
	if f.Status.Code != codes.Error || f.Status.Description != "node(s) failed: a" || len(f.Events) != 1 {
		t.Errorf("formula span status %v events %v", f.Status, f.Events)
	}
	if w.Status.Code == codes.Error {
		t.Errorf("workflow span has an error status")
	}
	name, _ := w.Resource.Set().Value("service.name")
	version, _ := w.Resource.Set().Value("service.version")
	if name.AsString() != "gantry-test" || version.AsString() != "1.2.3" {
		t.Errorf("resource %v", w.Resource)
	}
}

// A parent the submitter marked not sampled keeps its children out.
func TestRecordHonoursTheParentsSampling(t *testing.T) {
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp, _ := tracing.NewProvider(ctx, "gantry-test", "0", exp, false)
	tid := tracing.NewTraceID()
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: tracing.SpanID(tid, "x"), Remote: true})
	tracing.New(tp).Record(ctx, tracing.Span{Name: "workflow", Parent: parent, Start: time.Now(), End: time.Now()})
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans of an unsampled trace recorded", n)
	}
}

func TestFromEnvWithoutEndpointIsOff(t *testing.T) {
	t.Setenv(tracing.ExporterEnv, "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, shutdown, err := tracing.FromEnv(context.Background(), "gantry-test", os.Getenv)
	if err != nil || tr.Enabled() || shutdown(context.Background()) != nil {
		t.Fatalf("tracer %v, err %v", tr, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tr, shutdown, err = tracing.FromEnv(context.Background(), "gantry-test", os.Getenv)
	if err != nil || !tr.Enabled() {
		t.Fatalf("with an endpoint: tracer %v, err %v", tr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = shutdown(ctx) // nothing pending: returns at once
}

// A disabled Tracer costs a nil check.
func BenchmarkRecordDisabled(b *testing.B) {
	var tr *tracing.Tracer
	tid := tracing.NewTraceID()
	b.ReportAllocs()
	for b.Loop() {
		tr.Record(context.Background(), tracing.Span{Name: "node", TraceID: tid})
	}
}

func BenchmarkSpanID(b *testing.B) {
	tid := tracing.NewTraceID()
	b.ReportAllocs()
	for b.Loop() {
		tracing.SpanID(tid, "01a207d4-fdf2-7d7d-913f-04fe2e34ef3a", "1", "node", "base", "flaky")
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, spans go to the collector over
// OTLP/HTTP when the provider shuts down (or its batch is due).
func TestFromEnvExportsOverOTLPHTTP(t *testing.T) {
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%s %s %s %d", r.Method, r.URL.Path, r.Header.Get("Content-Type"), len(body))
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, shutdown, err := tracing.FromEnv(context.Background(), "gantry-test", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tr.Record(context.Background(), tracing.Span{Name: "workflow", TraceID: tracing.NewTraceID(), Start: now, End: now.Add(time.Second)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case req := <-got:
		if !strings.HasPrefix(req, "POST /v1/traces application/x-protobuf ") || strings.HasSuffix(req, " 0") {
			t.Fatalf("collector got %q", req)
		}
	default:
		t.Fatal("nothing exported by shutdown")
	}
}

// OTEL_TRACES_EXPORTER=console prints each span as JSON (on stderr:
// tracing.Console), with this build's version as service.version, and no
// collector is needed; "none" turns an endpoint off.
func TestFromEnvConsole(t *testing.T) {
	var out bytes.Buffer
	was := tracing.Console
	tracing.Console = &out
	t.Cleanup(func() { tracing.Console = was })
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv(tracing.ExporterEnv, "console")
	tr, shutdown, err := tracing.FromEnv(context.Background(), "gantry-test", os.Getenv)
	if err != nil || !tr.Enabled() {
		t.Fatalf("tracer %v, err %v", tr, err)
	}
	tid := tracing.NewTraceID()
	now := time.Now()
	tr.Record(context.Background(), tracing.Span{Name: "workflow", TraceID: tid, Start: now, End: now.Add(time.Second)})
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var sp struct {
		Name        string
		SpanContext struct{ TraceID string }
		Resource    []struct {
			Key   string
			Value struct{ Value any }
		}
	}
	if err := json.Unmarshal(out.Bytes(), &sp); err != nil {
		t.Fatalf("console output is not a span as JSON: %v\n%s", err, out.String())
	}
	version := ""
	for _, kv := range sp.Resource {
		if kv.Key == "service.version" {
			version, _ = kv.Value.Value.(string)
		}
	}
	if sp.Name != "workflow" || sp.SpanContext.TraceID != tid.String() || version != buildinfo.Version() {
		t.Errorf("span %q in trace %s, version %q; want workflow, %s, %s\n%s", sp.Name, sp.SpanContext.TraceID, version, tid, buildinfo.Version(), out.String())
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv(tracing.ExporterEnv, "none")
	if tracing.Configured(os.Getenv) {
		t.Error("OTEL_TRACES_EXPORTER=none exports spans")
	}
}

// Whether spans are exported is read from the variables the caller gives
// (a service's own lookup), not from the process's environment.
func TestConfiguredReadsTheGivenVariables(t *testing.T) {
	t.Setenv(tracing.ExporterEnv, "none")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, true},
		{map[string]string{tracing.ExporterEnv: "console"}, true},
		{map[string]string{tracing.ExporterEnv: "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false},
		{nil, false},
	} {
		if got := tracing.Configured(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%v: configured %v, want %v", c.env, got, c.want)
		}
	}
}
