package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStolenStateStoreCredentialDecidesNothing: with the state-store's
// credential, an attacker rewrites the per-host projection (gantry_state)
// to say a node that failed succeeded, with the right spec hash. The next
// submission still runs the node: what the planner skips comes from the
// executor's records, not the projection. A projection record that does
// not decode refuses no submission either.
func TestStolenStateStoreCredentialDecidesNothing(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	count, ready := filepath.Join(dir, "count"), filepath.Join(dir, "ready")
	c := &dag.Composition{Name: "forged-past", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Retry:    &dag.RetryPolicy{MaxAttempts: 1},
		Formulas: []dag.Formula{{ID: "a", Server: "me", Nodes: []dag.Node{{Name: "n", Run: "echo ran >> " + count + " && test -e " + ready}}}}}
	first := s.mustSubmit(c)
	if d := s.wait(first, 30*time.Second); d.Status != dag.WorkflowFailed || d.Formulas["a"].Nodes["n"].Status != dag.NodeFailed {
		t.Fatalf("first run: %s", d.Status)
	}
	s.waitFor("the projection to catch up", 15*time.Second, func() bool { return stateCaughtUp(s.js) })

	// The attacker, as the state-store.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(s.ns.Connect(events.StateStore))
	if err != nil {
		t.Fatal(err)
	}
	state, err := eventbus.NewBucket[events.HostNode](ctx, js, events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	key := events.HostNodeKey("me", c.Name, "a", "n")
	hn, rev, err := state.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if hn.Status != dag.NodeFailed || hn.InPlace != nil || hn.SpecHash == "" {
		t.Fatalf("the projection before the forgery: %+v", hn)
	}
	now := time.Now().UTC()
	hn.Status, hn.EndedAt = dag.NodeSucceeded, &now
	hn.InPlace = &events.InPlace{Status: dag.NodeSucceeded, SpecHash: hn.SpecHash, WorkflowID: first, EndedAt: &now}
	if _, err := state.Put(ctx, key, hn, rev); err != nil {
		t.Fatalf("the state-store's credential cannot write its projection: %v", err)
	}
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	second := s.mustSubmit(c)
	d := s.wait(second, 30*time.Second)
	if n := d.Formulas["a"].Nodes["n"]; d.Status != dag.WorkflowSucceeded || n.Status != dag.NodeSucceeded {
		t.Fatalf("after the forgery: workflow %s, a/n %s (want succeeded, run: the forged record must not skip it)", d.Status, n.Status)
	}
	if got := lines(t, count); len(got) != 2 {
		t.Fatalf("a/n ran %d times, want 2 (once per run)", len(got))
	}

	// A projection record that does not decode refuses nothing: the
	// submission is accepted, and skips a/n because the executor recorded
	// it succeeded with the same spec in the second run.
	s.waitFor("the projection to catch up", 15*time.Second, func() bool { return stateCaughtUp(s.js) })
	if _, err := state.KV.Put(ctx, key, []byte("\x00 not a record")); err != nil {
		t.Fatal(err)
	}
	third := s.mustSubmit(c)
	d = s.wait(third, 30*time.Second)
	if n := d.Formulas["a"].Nodes["n"]; d.Status != dag.WorkflowSucceeded || n.Status != dag.NodeSkipped {
		t.Fatalf("with a damaged projection: workflow %s, a/n %s (want succeeded, skipped)", d.Status, n.Status)
	}
	if got := lines(t, count); len(got) != 2 {
		t.Fatalf("a/n ran %d times, want 2", len(got))
	}
}
