package engine

import (
	"context"
	"testing"

	"github.com/gantry-dev/gantry/pkg/tracing"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkChain200Traced is BenchmarkChain200 with every span recorded
// (to an exporter that drops them, synchronously).
func BenchmarkChain200Traced(b *testing.B) {
	yaml := chainYAML(200)
	tp, err := tracing.NewProvider(context.Background(), "gantry-planner", "bench", tracetest.NewNoopExporter(), false)
	if err != nil {
		b.Fatal(err)
	}
	tr := tracing.New(tp)
	b.ReportAllocs()
	for b.Loop() {
		h := newHarness(&testing.T{})
		h.e.Tracer = tr
		runChain(b, h, yaml, 200)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*400), "ns/event")
}
