package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A retry re-runs only what failed: a node the retried run had completed
// before a newer run replaced it is not run again by the retry, so the
// retry must not make its old record the latest word on that node.
func TestARetryDoesNotMakeTheNodesItDidNotRunTheLatest(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// A: a/x created with chain's spec, b/y failed.
	older := ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded, "b/y": dag.NodeFailed}, nil)
	// B: a/x created with another spec (the host now has that), b/y ok.
	ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded, "b/y": dag.NodeSucceeded}, map[string]string{"a/x": "sha256:other"})
	// A retried later: only formula b runs again (a succeeded), b/y succeeds.
	rec, _, err := h.workflows.Get(context.Background(), older)
	must(t, err)
	h.nodes.Set(events.NodeKey(older, dag.OpCreate, "b", "y"), events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 2, Generation: 2, GenAttempts: 1, SpecHash: specs(t, h, chain)["b/y"]})
	later := h.e.Now().Add(time.Hour)
	h.e.Now = func() time.Time { return later }
	rec.Generation = 2 // retried
	h.e.activated(context.Background(), &rec)
	h.stored()
	// The host has a/x with "sha256:other": a submission of chain's spec
	// must run a/x, not skip it on A's first-generation record.
	must(t, h.submit(chain))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1")
}

// A composition's history entry that does not decode must not make its
// run the oldest: here it is the newer run, which created a/x with
// another spec; reading the older run first skips a/x on its record.
func TestABadHistoryEntryIsNotAReasonToSkip(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded}, nil)
	newer := ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded}, map[string]string{"a/x": "sha256:other"})
	h.workflows.SetRaw(historyKey("chain", newer), []byte("{not json"))
	h.stored()
	must(t, h.submit(chain))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1")
}
