// Package tracing records gantry's OpenTelemetry spans. A workflow's
// spans begin in one process and end in another (the planner that accepted
// a workflow may not be the one that sees it end), so no span is held
// open: each is recorded once it is over, with its start and end times
// from the events, and with a span id every process derives the same way
// (SpanID) from the trace id and what the span is about. A child can thus
// name its parent before the parent is recorded, in any process, after
// any restart.
//
// A Tracer without an exporter (nil, or Disabled) records nothing and
// costs a nil check.
package tracing

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"hash/fnv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer records finished spans of one service.
type Tracer struct {
	tracer trace.Tracer
}

// New is a Tracer on tp, which must have been made by NewProvider (its id
// generator honours the span ids Record asks for).
func New(tp *sdktrace.TracerProvider) *Tracer {
	return &Tracer{tracer: tp.Tracer("github.com/gantry-dev/gantry")}
}

// Enabled says spans are recorded (a nil Tracer records none).
func (t *Tracer) Enabled() bool { return t != nil }

// Span is a finished span to record.
type Span struct {
	Name string
	// Parent is the span this one is a child of. When it is invalid the
	// span is a root, in trace TraceID.
	Parent  trace.SpanContext
	TraceID trace.TraceID
	// ID is the span's id (SpanID); zero for a random one.
	ID         trace.SpanID
	Start, End time.Time
	Attrs      []attribute.KeyValue
	// Err, when set, gives the span an error status with this
	// description.
	Err    string
	Events []Event
}

// Event is a point in a span (a gate's check).
type Event struct {
	Name  string
	At    time.Time
	Attrs []attribute.KeyValue
}

// Record exports a finished span. It does nothing on a nil Tracer, or
// when the span has neither a valid parent nor a trace id.
func (t *Tracer) Record(ctx context.Context, s Span) {
	if t == nil || (!s.Parent.IsValid() && !s.TraceID.IsValid()) {
		return
	}
	ctx = context.WithValue(ctx, idsKey{}, ids{trace: s.TraceID, span: s.ID})
	if s.Parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, s.Parent)
	} else {
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{}) // a root, whatever ctx held
	}
	_, span := t.tracer.Start(ctx, s.Name, trace.WithTimestamp(s.Start), trace.WithAttributes(s.Attrs...))
	for _, e := range s.Events {
		span.AddEvent(e.Name, trace.WithTimestamp(e.At), trace.WithAttributes(e.Attrs...))
	}
	if s.Err != "" {
		span.SetStatus(codes.Error, s.Err)
	}
	span.End(trace.WithTimestamp(s.End))
}

// SpanID derives the id of the span about parts (a workflow id, a
// formula, a node, ...) in a trace: every process computes the same id.
func SpanID(t trace.TraceID, parts ...string) trace.SpanID {
	h := fnv.New64a()
	h.Write(t[:])
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	var id trace.SpanID
	binary.BigEndian.PutUint64(id[:], mix(h.Sum64())|1) // never zero
	return id
}

// mix spreads every input bit over the id (the splitmix64 finalizer):
// FNV alone leaves ids of "attempt 1" and "attempt 2" a few bits apart.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Context is ctx carrying the span context of span id in the trace of
// parent (its flags and state), for the headers of what is published
// about that span. With an invalid parent it returns ctx.
func Context(ctx context.Context, parent trace.SpanContext, id trace.SpanID) context.Context {
	if !parent.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, parent.WithSpanID(id).WithRemote(false))
}

// NewTraceID is a random trace id.
func NewTraceID() trace.TraceID {
	var t trace.TraceID
	_, _ = rand.Read(t[:])
	return t
}

// idsKey holds the ids Record asks the generator for.
type idsKey struct{}

type ids struct {
	trace trace.TraceID
	span  trace.SpanID
}

// idGenerator hands out the ids Record asks for, random ones otherwise.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	want, _ := ctx.Value(idsKey{}).(ids)
	t, s := want.trace, want.span
	if !t.IsValid() {
		t = NewTraceID()
	}
	if !s.IsValid() {
		s = randomSpanID()
	}
	return t, s
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if want, _ := ctx.Value(idsKey{}).(ids); want.span.IsValid() {
		return want.span
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		_, _ = rand.Read(s[:])
	}
	return s
}

// NewSpanID is a random span id.
func NewSpanID() trace.SpanID { return randomSpanID() }
