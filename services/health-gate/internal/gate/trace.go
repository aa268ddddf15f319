package gate

import (
	"context"
	"strconv"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A gate is one span under its formula's span (whose context the gate
// request carries), from its first check to its verdict, with one event
// per check. The check command is not an attribute.

func (r *gateRun) spanID() trace.SpanID {
	if !r.parent.IsValid() {
		return trace.SpanID{}
	}
	return tracing.SpanID(r.parent.TraceID(), r.g.WorkflowID, strconv.Itoa(r.g.Generation), "gate", r.g.Formula)
}

// noteCheck keeps a check for the gate's span.
func (r *gateRun) noteCheck(ev *events.HealthEvent) {
	if !r.c.Tracer.Enabled() || !r.parent.IsValid() {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("gantry.attempt", ev.Attempt), attribute.String("gantry.status", string(ev.Status))}
	if ev.ExitCode != nil {
		attrs = append(attrs, attribute.Int("gantry.exit_code", *ev.ExitCode))
	}
	r.checks = append(r.checks, tracing.Event{Name: "check", At: *ev.StartedAt, Attrs: attrs})
}

// record records the gate's span, ended by the verdict ev.
func (r *gateRun) record(ctx context.Context, ev *events.HealthEvent) {
	if !r.c.Tracer.Enabled() || !r.parent.IsValid() {
		return
	}
	s := tracing.Span{Name: "gate", Parent: r.parent, ID: r.spanID(), Start: r.begun, End: *ev.EndedAt, Events: r.checks,
		Attrs: []attribute.KeyValue{
			attribute.String("gantry.workflow_id", r.g.WorkflowID), attribute.String("gantry.formula", r.g.Formula), attribute.String("gantry.host", r.g.Ref.Host),
			attribute.Int("gantry.generation", r.g.Generation), attribute.String("gantry.status", string(ev.Status)), attribute.Int("gantry.checks", ev.Attempt),
		}}
	if ev.Status != events.HealthPass {
		s.Err = ev.Error
	}
	r.c.Tracer.Record(ctx, s)
}
