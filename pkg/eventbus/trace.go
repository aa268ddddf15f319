package eventbus

import (
	"context"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceContext is the only propagator used on the bus: W3C Trace Context,
// whatever global propagator the process has.
var traceContext propagation.TraceContext

// HeaderCarrier adapts nats.Header to propagation.TextMapCarrier. Keys
// are used as given (lower case, as W3C names them); NATS headers are
// case-sensitive.
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the keys present.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectTrace adds ctx's span context to h as traceparent and tracestate.
// It returns h, allocated when nil and there is something to add; with no
// valid span context in ctx it returns h unchanged (nothing is allocated,
// so untraced work costs nothing).
func InjectTrace(ctx context.Context, h nats.Header) nats.Header {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return h
	}
	if h == nil {
		h = nats.Header{}
	}
	traceContext.Inject(ctx, HeaderCarrier(h))
	return h
}

// ExtractTrace returns ctx with the remote span context h carries (as the
// parent of what the receiver does), or ctx unchanged when h carries none
// or a malformed one.
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if len(h[events.TraceParentHeader]) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, HeaderCarrier(h))
}
