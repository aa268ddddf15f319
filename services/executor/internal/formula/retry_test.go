package formula

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A retry limited to one of a formula's failed nodes runs it and what
// depends on it; the other failed node is failed again without running,
// what depends only on it is blocked, and a node that the first failure
// kept from starting stays cancelled. Under on_failure stop the held
// failure does not stop the retried node; the formula fails.
func TestRetryOfOneNodeHoldsTheOthers(t *testing.T) {
	t.Parallel()
	h := newHarness()
	for _, n := range []string{"x", "y"} {
		h.records.Set(h.key(dag.OpCreate, n), Record{Status: dag.NodeFailed, Attempt: 1, Generation: 1, GenAttempts: 1})
	}
	h.records.Set(h.key(dag.OpCreate, "ok"), Record{Status: dag.NodeSucceeded, Attempt: 1, Generation: 1, GenAttempts: 1})
	held := func(n events.WorkNode) events.WorkNode { n.NotRetried = true; return n }
	d := dispatch(dag.OpCreate, 2,
		node("ok", "run-ok", 1),
		held(node("y", "run-y", 1, "ok")),
		node("x", "run-x", 1, "ok"),
		node("xz", "run-xz", 1, "x"),
		held(node("yz", "run-yz", 1, "y")),
		held(node("c", "run-c", 1, "ok")),
	)
	d.MaxParallel = 1
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if got, want := h.host.scripts(), []string{"run-x", "run-xz"}; !slices.Equal(got, want) {
		t.Fatalf("ran %q, want %q", got, want)
	}
	got := strings.Join(h.stored(), "\n")
	for _, want := range []string{
		"y failed 1: not retried: the retry named other nodes",
		"x succeeded 2", "xz succeeded 1",
		"yz blocked 0",
		"c cancelled 0: not retried: the retry named other nodes",
		"f failed: node(s) failed: y",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	if r := h.record(dag.OpCreate, "y"); r.Status != dag.NodeFailed || r.Generation != 1 {
		t.Fatalf("held node's record changed: %+v", r)
	}
}
