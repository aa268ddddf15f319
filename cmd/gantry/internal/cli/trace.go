package cli

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// A submitted workflow is one trace, started here: the submit request
// carries a traceparent header, and the planner makes the workflow's span
// its child. With OTEL_EXPORTER_OTLP_ENDPOINT set, the CLI records a
// "gantry submit" span (a child of TRACEPARENT when that is set) and the
// header names it; with only TRACEPARENT (and TRACESTATE) set, the header
// passes it on; with neither, there is no header and a planner that
// exports spans starts the trace.

// submitTrace is a submit's trace: the header to send, and end, to call
// with the outcome once the reply is in.
type submitTrace struct {
	header nats.Header
	tracer *tracing.Tracer
	flush  func(context.Context) error
	span   tracing.Span
}

// envParent is the span context TRACEPARENT and TRACESTATE name (invalid
// when unset or malformed).
func envParent() trace.SpanContext {
	c := propagation.MapCarrier{events.TraceParentHeader: os.Getenv("TRACEPARENT"), events.TraceStateHeader: os.Getenv("TRACESTATE")}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
}

func startSubmitTrace(stderr io.Writer) *submitTrace {
	parent := envParent()
	st := &submitTrace{}
	tr, flush, err := tracing.FromEnv(context.Background(), "gantry-cli", os.Getenv)
	if err != nil {
		linef(stderr, "gantry: no trace of this submit: %v", err)
	}
	span := parent
	if tr.Enabled() {
		st.tracer, st.flush = tr, flush
		tid := parent.TraceID()
		if !parent.IsValid() {
			tid = tracing.NewTraceID()
		}
		st.span = tracing.Span{Name: "gantry submit", Parent: parent, TraceID: tid, ID: tracing.NewSpanID(), Start: time.Now()}
		cfg := trace.SpanContextConfig{TraceID: tid, SpanID: st.span.ID, TraceFlags: trace.FlagsSampled, TraceState: parent.TraceState()}
		if parent.IsValid() {
			cfg.TraceFlags = parent.TraceFlags()
		}
		span = trace.NewSpanContext(cfg)
	}
	st.header = eventbus.InjectTrace(trace.ContextWithSpanContext(context.Background(), span), nil)
	return st
}

// end records the submit's span (when this CLI exports spans) and sends
// it before the CLI goes on.
func (st *submitTrace) end(workflowID string, err error) {
	if st.tracer == nil {
		return
	}
	st.span.End = time.Now()
	if workflowID != "" {
		st.span.Attrs = append(st.span.Attrs, attribute.String("gantry.workflow_id", workflowID))
	}
	if err != nil {
		st.span.Err = err.Error()
	}
	st.tracer.Record(context.Background(), st.span)
	// A collector that does not answer delays the submit by this much at
	// most.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = st.flush(ctx)
}
