package formula

import (
	"context"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The dispatch's span context (the formula's span) is the parent of the
// node spans, each attempt hangs under its node with its exit code, and
// node events carry their node's span.
func TestNodeAndAttemptSpans(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider(context.Background(), "gantry-executor", "test", exp, false)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness()
	h.x.Tracer = tracing.New(tp)
	h.host.exits["run-a"] = []int{3, 0}
	tid := tracing.NewTraceID()
	formula := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: tracing.SpanID(tid, "formula"), TraceFlags: trace.FlagsSampled, Remote: true})
	d := dispatch(dag.OpCreate, 1, node("a", "run-a", 2), node("b", "run-b", 1, "a"))
	if err := h.x.Run(trace.ContextWithRemoteSpanContext(context.Background(), formula), d); err != nil {
		t.Fatal(err)
	}
	nodeA, nodeB := tracing.SpanID(tid, "w1", "1", "node", "f", "a"), tracing.SpanID(tid, "w1", "1", "node", "f", "b")
	want := []struct {
		name     string
		parent   trace.SpanID
		id       trace.SpanID
		exit     string
		err      bool
		attempts string
	}{
		{"attempt 1", nodeA, tracing.SpanID(tid, "w1", "1", "attempt", "f", "a", "1"), "3", true, ""},
		{"attempt 2", nodeA, tracing.SpanID(tid, "w1", "1", "attempt", "f", "a", "2"), "0", false, ""},
		{"node a", formula.SpanID(), nodeA, "0", false, "2"},
		{"attempt 1", nodeB, tracing.SpanID(tid, "w1", "1", "attempt", "f", "b", "1"), "0", false, ""},
		{"node b", formula.SpanID(), nodeB, "0", false, "1"},
	}
	spans := exp.GetSpans()
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, w := range want {
		sp := spans[i]
		label := sp.Name + " " + attr(sp, map[string]string{"attempt": "gantry.attempt", "node": "gantry.node"}[sp.Name])
		if label != w.name || sp.Parent.SpanID() != w.parent || sp.SpanContext.SpanID() != w.id || sp.SpanContext.TraceID() != tid ||
			attr(sp, "gantry.exit_code") != w.exit || (sp.Status.Code == codes.Error) != w.err || attr(sp, "gantry.host") != "h1" {
			t.Errorf("span %d: %s %v parent %v exit %s status %v; want %+v", i, sp.Name, sp.SpanContext.SpanID(), sp.Parent.SpanID(), attr(sp, "gantry.exit_code"), sp.Status, w)
		}
		if w.attempts != "" && attr(sp, "gantry.attempts") != w.attempts {
			t.Errorf("%s: %s attempts", sp.Name, attr(sp, "gantry.attempts"))
		}
		for _, a := range sp.Attributes {
			if v := a.Value.Emit(); v == "run-a" || v == "run-b" {
				t.Errorf("%s has the command as %s", sp.Name, a.Key)
			}
		}
	}
	for _, e := range h.bus.out.Stored() {
		want := formula.SpanID()
		if ev, ok := e.Payload.(*events.NodeEvent); ok {
			want = tracing.SpanID(tid, "w1", "1", "node", "f", ev.Node)
		}
		if e.Trace.TraceID() != tid || e.Trace.SpanID() != want {
			t.Errorf("%T carries %v, want span %v", e.Payload, e.Trace, want)
		}
	}
}

// An untraced dispatch records nothing and publishes no trace context.
func TestUntracedDispatch(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp, _ := tracing.NewProvider(context.Background(), "gantry-executor", "test", exp, false)
	h := newHarness()
	h.x.Tracer = tracing.New(tp)
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("a", "run-a", 1))); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans of an untraced dispatch", n)
	}
	for _, e := range h.bus.out.Stored() {
		if e.Trace.IsValid() {
			t.Fatalf("%T carries %v", e.Payload, e.Trace)
		}
	}
}

func attr(sp tracetest.SpanStub, key string) string {
	for _, a := range sp.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}
