package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A workflow is one trace. Its record keeps the trace (TraceRef), so any
// planner replica, after any restart, names the same spans: the workflow
// span and each formula's have ids derived from the trace id
// (tracing.SpanID), and are recorded when they end, with their start
// times. What the planner publishes carries the span it is about in its
// headers: workflow events the workflow span, formula events, dispatches
// and gate requests the formula's span (the executor and the health-gate
// hang their spans under it).

// TraceRef is the trace of a workflow, in its record.
type TraceRef struct {
	TraceID string `json:"trace_id"`
	// Parent is the span the submitter's traceparent named (the CLI's
	// submit span, or whatever TRACEPARENT it ran under); none when the
	// planner started the trace.
	Parent  string `json:"parent_span_id,omitempty"`
	Sampled bool   `json:"sampled"`
	State   string `json:"tracestate,omitempty"`
	// Span numbers the workflow span under way: 1 from the submission to
	// the first final state, one more for each retry after one.
	Span int `json:"span"`
	// Since is when the workflow span under way started.
	Since time.Time `json:"since"`
}

// newTrace is the trace of a workflow accepted now: the submitter's, when
// ctx carries its span context, else a new one when this planner records
// spans, else none (nothing traces this workflow).
func (e *Engine) newTrace(ctx context.Context, now time.Time) *TraceRef {
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsValid() {
		return &TraceRef{TraceID: sc.TraceID().String(), Parent: sc.SpanID().String(), Sampled: sc.IsSampled(), State: sc.TraceState().String(), Span: 1, Since: now}
	}
	if !e.Tracer.Enabled() {
		return nil
	}
	return &TraceRef{TraceID: tracing.NewTraceID().String(), Sampled: true, Span: 1, Since: now}
}

// spanContext is the span context of span id in this trace.
func (t *TraceRef) spanContext(id trace.SpanID) trace.SpanContext {
	tid, _ := trace.TraceIDFromHex(t.TraceID)
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: id}
	if t.Sampled {
		cfg.TraceFlags = trace.FlagsSampled
	}
	if ts, err := trace.ParseTraceState(t.State); err == nil {
		cfg.TraceState = ts
	}
	return trace.NewSpanContext(cfg)
}

func (t *TraceRef) traceID() trace.TraceID {
	tid, _ := trace.TraceIDFromHex(t.TraceID)
	return tid
}

// workflowSpan is the id of workflow span n.
func (r *run) workflowSpan(n int) trace.SpanID {
	return tracing.SpanID(r.rec.Trace.traceID(), r.rec.ID, "workflow", strconv.Itoa(n))
}

// formulaSpan is the id of formula i's span in the current generation.
func (r *run) formulaSpan(i int) trace.SpanID {
	return tracing.SpanID(r.rec.Trace.traceID(), r.rec.ID, strconv.Itoa(r.rec.Generation), "formula", r.plan.Formulas[i].ID)
}

// workflowCtx is ctx carrying the workflow span under way (unchanged for
// an untraced workflow).
func (r *run) workflowCtx(ctx context.Context) context.Context {
	if r.rec.Trace == nil {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, r.rec.Trace.spanContext(r.workflowSpan(r.rec.Trace.Span)))
}

// formulaCtx is ctx carrying formula i's span.
func (r *run) formulaCtx(ctx context.Context, i int) context.Context {
	if r.rec.Trace == nil {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, r.rec.Trace.spanContext(r.formulaSpan(i)))
}

// formulaStarted notes when formula i started (its dispatch), for its
// span; a time already noted stays.
func (e *Engine) formulaStarted(r *run, i int, at time.Time) {
	if !e.Tracer.Enabled() || r.rec.Trace == nil {
		return
	}
	if r.started == nil {
		r.started = map[int]time.Time{}
	}
	if _, ok := r.started[i]; !ok {
		r.started[i] = at
	}
}

// formulaFinal says st ends formula i (its gate, if it has one, is over).
func formulaFinal(r *run, i int, st dag.FormulaState) bool {
	switch st {
	case dag.FormulaSucceeded:
		return r.plan.Formulas[i].Gate == nil
	case dag.FormulaHealthy, dag.FormulaUnhealthy, dag.FormulaFailed, dag.FormulaCancelled:
		return true
	}
	return false
}

// recordFormula records formula i's span, ended in state st. It starts at
// the dispatch this planner made, or (after a restart or on another
// replica) at the start the ending event gives.
func (e *Engine) recordFormula(ctx context.Context, r *run, i int, st dag.FormulaState) {
	if !e.Tracer.Enabled() || r.rec.Trace == nil {
		return
	}
	pf := &r.plan.Formulas[i]
	now := e.now()
	start, ok := r.started[i]
	if !ok {
		start = now
	}
	delete(r.started, i)
	s := tracing.Span{Name: "formula", Parent: r.rec.Trace.spanContext(r.workflowSpan(r.rec.Trace.Span)), ID: r.formulaSpan(i),
		Start: start, End: now, Attrs: []attribute.KeyValue{
			attribute.String("gantry.workflow_id", r.rec.ID), attribute.String("gantry.formula", pf.ID), attribute.String("gantry.host", pf.Server),
			attribute.String("gantry.status", string(st)), attribute.Int("gantry.generation", r.rec.Generation), attribute.Int("gantry.nodes", len(pf.Nodes)),
		}}
	if st == dag.FormulaFailed || st == dag.FormulaUnhealthy {
		s.Err = "formula " + string(st)
	}
	e.Tracer.Record(ctx, s)
}

// recordWorkflow records the workflow span under way, ended in state st
// (a final one).
func (e *Engine) recordWorkflow(ctx context.Context, r *run, st dag.WorkflowState, reason string) {
	t := r.rec.Trace
	if !e.Tracer.Enabled() || t == nil {
		return
	}
	s := tracing.Span{Name: "workflow", ID: r.workflowSpan(t.Span), Start: t.Since, End: e.now(), Attrs: []attribute.KeyValue{
		attribute.String("gantry.workflow_id", r.rec.ID), attribute.String("gantry.workflow", r.rec.Name), attribute.String("gantry.operation", string(r.rec.Operation)),
		attribute.String("gantry.status", string(st)), attribute.Int("gantry.generation", r.rec.Generation), attribute.Int("gantry.formulas", len(r.plan.Formulas)),
	}}
	switch {
	case t.Span > 1:
		s.Parent = t.spanContext(r.workflowSpan(1)) // a retry hangs under the first run
	case t.Parent != "":
		sid, _ := trace.SpanIDFromHex(t.Parent)
		s.Parent = t.spanContext(sid).WithRemote(true)
	default:
		s.TraceID = t.traceID()
	}
	if st == dag.WorkflowFailed {
		s.Err = reason
	}
	e.Tracer.Record(ctx, s)
}

// nextWorkflowSpan starts a new workflow span when a finished workflow is
// retried.
func (r *run) nextWorkflowSpan(now time.Time) {
	if r.rec.Trace != nil {
		r.rec.Trace.Span++
		r.rec.Trace.Since = now
	}
}
