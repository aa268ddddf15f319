package eventbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

func spanContext(t *testing.T, traceparent, tracestate string) trace.SpanContext {
	t.Helper()
	ctx := eventbus.ExtractTrace(context.Background(), nats.Header{"traceparent": {traceparent}, "tracestate": {tracestate}})
	return trace.SpanContextFromContext(ctx)
}

func TestTraceHeaders(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name      string
		header    nats.Header
		wantValid bool
		wantTrace string
		wantSpan  string
		wantState string
	}{
		{"w3c example", nats.Header{"traceparent": {tp}, "tracestate": {"congo=t61rcWkgMzE"}}, true, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "congo=t61rcWkgMzE"},
		{"no header", nil, false, "", "", ""},
		{"other headers only", nats.Header{"Nats-Msg-Id": {"x"}}, false, "", "", ""},
		{"malformed", nats.Header{"traceparent": {"00-zz-00f067aa0ba902b7-01"}}, false, "", "", ""},
		{"zero trace id", nats.Header{"traceparent": {"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}}, false, "", "", ""},
		{"upper-case key is not ours", nats.Header{"Traceparent": {tp}}, false, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := trace.SpanContextFromContext(eventbus.ExtractTrace(context.Background(), tt.header))
			if sc.IsValid() != tt.wantValid {
				t.Fatalf("valid = %v, want %v", sc.IsValid(), tt.wantValid)
			}
			if !tt.wantValid {
				return
			}
			if sc.TraceID().String() != tt.wantTrace || sc.SpanID().String() != tt.wantSpan || sc.TraceState().String() != tt.wantState || !sc.IsRemote() || !sc.IsSampled() {
				t.Fatalf("extracted %v (state %q)", sc, sc.TraceState())
			}
			// And back: the same header out as in.
			h := eventbus.InjectTrace(trace.ContextWithSpanContext(context.Background(), sc), nil)
			if h.Get("traceparent") != tt.header.Get("traceparent") || h.Get("tracestate") != tt.header.Get("tracestate") {
				t.Fatalf("injected %v, want %v", h, tt.header)
			}
		})
	}
	if h := eventbus.InjectTrace(context.Background(), nil); h != nil {
		t.Fatalf("no span context injected %v", h)
	}
	keep := nats.Header{"a": {"b"}}
	if h := eventbus.InjectTrace(context.Background(), keep); len(h) != 1 {
		t.Fatalf("header changed without a span context: %v", h)
	}
}

// Events published with a span context in ctx carry it in their NATS
// headers, through the Publisher and the Outbox, on a real server.
func TestPublishCarriesTraceparent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	nc := ns.Connect(events.Executor)
	js, err := eventbus.Open(ctx, nc, events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := spanContext(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	tctx := trace.ContextWithSpanContext(ctx, sc)
	pub := &eventbus.Publisher{JS: js, NC: nc, Source: "executor/test"}
	ev := func(node string) *events.NodeEvent {
		e := &events.NodeEvent{Ref: events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "f", Host: "h1", Operation: dag.OpCreate, Generation: 1}, Status: dag.NodeRunning}
		e.Node = node
		return e
	}
	if err := pub.Publish(tctx, events.HostLifecycle("h1"), ev("a"), "m-a"); err != nil {
		t.Fatal(err)
	}
	out := pub.Outbox()
	out.Emit(tctx, events.HostLifecycle("h1"), ev("b"), "m-b")
	out.Emit(ctx, events.HostLifecycle("h1"), ev("c"), "m-c") // untraced
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	admin, _ := jetstream.New(ns.Connect(busauth.Admin))
	s, err := admin.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{1: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 2: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", 3: ""}
	for seq, tp := range want {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(events.TraceParentHeader); got != tp {
			t.Errorf("message %d: traceparent %q, want %q", seq, got, tp)
		}
		if m.Header.Get(jetstream.MsgIDHeader) == "" {
			t.Errorf("message %d lost its Nats-Msg-Id", seq)
		}
	}
}

// The header cost per published message: nothing without a trace.
func BenchmarkInjectTrace(b *testing.B) {
	untraced := context.Background()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	traced := trace.ContextWithSpanContext(untraced, sc)
	b.Run("untraced", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if eventbus.InjectTrace(untraced, nil) != nil {
				b.Fatal("header")
			}
		}
	})
	b.Run("traced", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			eventbus.InjectTrace(traced, nil)
		}
	})
}
