package formula

import (
	"context"
	"strconv"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A node's span and its attempts' spans hang under the formula's span,
// whose context the dispatch carries. Their ids are derived
// (tracing.SpanID), so an attempt recorded by another executor, or after
// a restart, still names its node. Commands and environments are not
// attributes: a span says which node, host and attempt, and how it ended.

// nodeSpan is the id of node j's span in this generation.
func (f *formulaRun) nodeSpan(j int) trace.SpanID {
	if !f.span.IsValid() {
		return trace.SpanID{}
	}
	return tracing.SpanID(f.span.TraceID(), f.d.WorkflowID, strconv.Itoa(f.d.Generation), "node", f.d.Formula, f.d.Nodes[j].Name)
}

func (f *formulaRun) attrs(j int) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("gantry.workflow_id", f.d.WorkflowID), attribute.String("gantry.formula", f.d.Formula),
		attribute.String("gantry.node", f.d.Nodes[j].Name), attribute.String("gantry.host", f.d.Ref.Host),
		attribute.Int("gantry.generation", f.d.Generation),
	}
}

// recordAttempt records one attempt's span.
func (nr *nodeRun) recordAttempt(ctx context.Context, ev *events.NodeEvent, attempt int, start, end time.Time) {
	if !nr.x.Tracer.Enabled() || !nr.span.IsValid() {
		return
	}
	s := tracing.Span{Name: "attempt", Parent: nr.span.WithSpanID(nr.nodeSpan(nr.j)),
		ID:    tracing.SpanID(nr.span.TraceID(), nr.d.WorkflowID, strconv.Itoa(nr.d.Generation), "attempt", nr.d.Formula, nr.n.Name, strconv.Itoa(attempt)),
		Start: start, End: end,
		Attrs: append(nr.attrs(nr.j), attribute.Int("gantry.attempt", attempt), attribute.String("gantry.status", string(ev.Status)), attribute.Bool("gantry.will_retry", ev.WillRetry))}
	if ev.ExitCode != nil {
		s.Attrs = append(s.Attrs, attribute.Int("gantry.exit_code", *ev.ExitCode))
	}
	if ev.Status == dag.NodeFailed {
		s.Err = failure(ev)
	}
	nr.x.Tracer.Record(ctx, s)
}

// recordNode records the node's span, from the start of the first attempt
// this delivery made or resumed (a resumed attempt's recorded start, which
// an earlier delivery may have made), or its skip, to its final state.
func (nr *nodeRun) recordNode(ctx context.Context, st dag.NodeState) {
	if !nr.x.Tracer.Enabled() || !nr.span.IsValid() || nr.first.IsZero() {
		return
	}
	s := tracing.Span{Name: "node", Parent: nr.span, ID: nr.nodeSpan(nr.j), Start: nr.first, End: time.Now().UTC(),
		Attrs: append(nr.attrs(nr.j), attribute.String("gantry.status", string(st)), attribute.Int("gantry.attempts", nr.rec.Attempt))}
	if nr.rec.ExitCode != nil {
		s.Attrs = append(s.Attrs, attribute.Int("gantry.exit_code", *nr.rec.ExitCode))
	}
	if st == dag.NodeFailed {
		s.Err = "node failed"
	}
	nr.x.Tracer.Record(ctx, s)
}

// failure describes a failed attempt for its span: the event's error (as
// published: bounded, secrets masked), or its exit code.
func failure(ev *events.NodeEvent) string {
	switch {
	case ev.Error != "":
		return ev.Error
	case ev.ExitCode != nil:
		return "exit code " + strconv.Itoa(*ev.ExitCode)
	}
	return "failed"
}
