package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// chainYAML is a chain of n formulas of one node each on one host.
func chainYAML(n int) string {
	var b strings.Builder
	b.WriteString("name: bench\nhosts: {h1: {transport: local}}\nformulas:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - id: f%d\n    server: h1\n    nodes: [{name: x, run: \"true\"}]\n", i)
		if i > 0 {
			fmt.Fprintf(&b, "    depends_on: [f%d]\n", i-1)
		}
	}
	return b.String()
}

// runChain submits a chain of n formulas and reports each running and
// succeeded, as the executor would: the planner's work per event.
func runChain(b *testing.B, h *harness, yaml string, n int) {
	b.Helper()
	ctx := context.Background()
	reply, err := h.e.Submit(ctx, []byte(yaml), false, operator)
	if err != nil {
		b.Fatal(err)
	}
	h.id = reply.WorkflowID
	if err := h.e.Start(ctx, h.id); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		f := fmt.Sprintf("f%d", i)
		if err := h.formula(f, 1, dag.FormulaRunning); err != nil {
			b.Fatal(err)
		}
		if err := h.formula(f, 1, dag.FormulaSucceeded); err != nil {
			b.Fatal(err)
		}
	}
	if h.status() != dag.WorkflowSucceeded {
		b.Fatalf("status %s", h.status())
	}
}

// BenchmarkChain200 is the planner's cost per formula event of a
// 200-formula chain on in-memory ports, untraced.
func BenchmarkChain200(b *testing.B) {
	yaml := chainYAML(200)
	b.ReportAllocs()
	for b.Loop() {
		h := newHarness(&testing.T{})
		runChain(b, h, yaml, 200)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*400), "ns/event")
}
