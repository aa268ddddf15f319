package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func tracedHarness(t *testing.T) (*harness, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider(context.Background(), "gantry-planner", "test", exp, false)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.e.Tracer = tracing.New(tp)
	return h, exp
}

// The workflow continues the submitter's trace; the formula spans hang
// under the workflow span, whose id a restarted planner derives again;
// what the planner publishes carries the span it is about.
func TestTraceAcrossARestart(t *testing.T) {
	h, exp := tracedHarness(t)
	ctx := context.Background()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: tracing.SpanID(tid, "cli"), TraceFlags: trace.FlagsSampled, Remote: true})
	reply, err := h.e.Submit(trace.ContextWithRemoteSpanContext(ctx, parent), []byte(gated), false, operator)
	if err != nil || reply.Status != "accepted" {
		t.Fatalf("submit: %v %v", reply, err)
	}
	h.id = reply.WorkflowID
	if err := h.e.Start(ctx, h.id); err != nil {
		t.Fatal(err)
	}
	begun := time.Unix(1_799_999_990, 0).UTC()
	if err := h.handle(&events.FormulaEvent{Ref: h.ref("a", 1), Status: dag.FormulaRunning, Run: events.Run{StartedAt: &begun}}); err != nil {
		t.Fatal(err)
	}
	must(t, h.formula("a", 1, dag.FormulaSucceeded)) // gated: not over yet
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans before anything ended", n)
	}
	tracer := h.e.Tracer
	h.fresh() // another replica, or a restart: nothing in memory
	h.e.Tracer = tracer
	gateStart := time.Unix(1_799_999_995, 0).UTC()
	must(t, h.handle(&events.HealthEvent{Ref: h.ref("a", 1), Status: events.HealthPass, Final: true, Run: events.Run{StartedAt: &gateStart}}))
	must(t, h.formula("b", 1, dag.FormulaRunning))
	must(t, h.formula("b", 1, dag.FormulaFailed))
	if h.status() != dag.WorkflowFailed {
		t.Fatalf("status %s", h.status())
	}
	wf := tracing.SpanID(tid, h.id, "workflow", "1")
	fa, fb := tracing.SpanID(tid, h.id, "1", "formula", "a"), tracing.SpanID(tid, h.id, "1", "formula", "b")
	spans := exp.GetSpans()
	want := []struct {
		name   string
		id     trace.SpanID
		parent trace.SpanID
		err    bool
	}{{"formula a", fa, wf, false}, {"formula b", fb, wf, true}, {"workflow gated", wf, parent.SpanID(), true}}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d: %v", len(spans), len(want), spans)
	}
	for i, w := range want {
		sp := spans[i]
		if spanLabel(sp) != w.name || sp.SpanContext.TraceID() != tid || sp.SpanContext.SpanID() != w.id || sp.Parent.SpanID() != w.parent || (sp.Status.Code == codes.Error) != w.err {
			t.Errorf("span %d: %s %v parent %v status %v; want %+v", i, sp.Name, sp.SpanContext.SpanID(), sp.Parent.SpanID(), sp.Status, w)
		}
	}
	// a's span starts where the event the restarted planner saw says.
	if !spans[0].StartTime.Equal(gateStart) {
		t.Errorf("formula a started %v, want %v", spans[0].StartTime, gateStart)
	}
	for _, e := range h.out.Stored() {
		var want trace.SpanID
		switch p := e.Payload.(type) {
		case *events.WorkflowEvent:
			want = wf
		case *events.Dispatch:
			want = tracing.SpanID(tid, h.id, "1", "formula", p.Formula)
		case *events.GateRequest:
			want = fa
		case *events.FormulaEvent:
			want = tracing.SpanID(tid, h.id, "1", "formula", p.Formula)
		default:
			continue
		}
		if e.Trace.TraceID() != tid || e.Trace.SpanID() != want {
			t.Errorf("%s carries %v, want span %v", describe(e), e.Trace, want)
		}
	}

	// A retry of the failed run is a second workflow span, under the
	// first.
	must(t, h.control(events.VerbRetry))
	must(t, h.formula("b", 2, dag.FormulaRunning))
	must(t, h.formula("b", 2, dag.FormulaSucceeded))
	spans = exp.GetSpans()
	last := spans[len(spans)-1]
	if spanLabel(last) != "workflow gated" || last.SpanContext.SpanID() != tracing.SpanID(tid, h.id, "workflow", "2") || last.Parent.SpanID() != wf || last.Status.Code == codes.Error {
		t.Errorf("retry's workflow span %s %v parent %v status %v", last.Name, last.SpanContext.SpanID(), last.Parent.SpanID(), last.Status)
	}
}

// Without a tracer and without a submitter's trace, nothing is traced:
// no trace in the record, no trace context on what is published.
func TestUntracedWorkflow(t *testing.T) {
	h := newHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	rec, _, _ := h.workflows.Get(context.Background(), h.id)
	if rec.Trace != nil {
		t.Fatalf("trace %+v", rec.Trace)
	}
	for _, e := range h.out.Stored() {
		if e.Trace.IsValid() {
			t.Fatalf("%s carries %v", describe(e), e.Trace)
		}
	}
	// A planner that records spans starts the trace itself.
	h, exp := tracedHarness(t)
	must(t, h.submit(chain))
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	must(t, h.formula("b", 1, dag.FormulaSucceeded))
	spans := exp.GetSpans()
	if len(spans) != 3 || spans[2].Parent.IsValid() || spans[0].Parent.SpanID() != spans[2].SpanContext.SpanID() {
		t.Fatalf("spans %v", spans)
	}
}

// spanLabel is a span's name (its kind) and what it is about, from its
// attributes: "formula a", "workflow gated".
func spanLabel(sp tracetest.SpanStub) string {
	key := map[string]string{"formula": "gantry.formula", "workflow": "gantry.workflow"}[sp.Name]
	for _, a := range sp.Attributes {
		if string(a.Key) == key {
			return sp.Name + " " + a.Value.Emit()
		}
	}
	return sp.Name
}
