package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

func (s *stack) drift(c *dag.Composition) events.DriftReport {
	s.t.Helper()
	doc, _ := json.Marshal(c)
	loaded, err := composition.Load("", doc) // rendered here, as gantry drift --records does
	if err != nil {
		s.t.Fatal(err)
	}
	rep, err := s.cl.WithTimeout(10*time.Second).Drift(context.Background(), dag.PlanLoaded(loaded))
	if err != nil {
		s.t.Fatalf("drift: %s", failure(err))
	}
	return rep
}

func (s *stack) rebuild(checkOnly bool) (keys int, differing []string, rewritten bool) {
	s.t.Helper()
	rep := s.rebuildReport(checkOnly)
	return rep.Keys, rep.Differing, rep.Rewritten
}

func TestDriftAndRebuild(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	c := localComp(dir, "drifty", "")
	if d := s.wait(s.mustSubmit(c), 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("create: %s", d.Status)
	}
	if rep := s.drift(localComp(dir, "drifty", "")); rep.Counts[events.DriftOK] != 4 || len(rep.Items) != 4 {
		t.Fatalf("right after the run: %+v", rep)
	}
	// edit one node, drop one, add one
	edited := localComp(dir, "drifty", "")
	edited.Formulas[0].Nodes[0].Run += " # v2"
	edited.Formulas[1].Nodes = edited.Formulas[1].Nodes[:1]
	edited.Formulas[1].Nodes = append(edited.Formulas[1].Nodes, dag.Node{Name: "e", Run: "true"})
	rep := s.drift(edited)
	got := map[string]string{}
	for _, it := range rep.Items {
		got[it.Formula+"/"+it.Node] = it.Drift
	}
	want := map[string]string{"base/a": "changed", "base/b": "ok", "app/c": "ok", "app/e": "missing", "app/d": "orphaned"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	// the projection equals a replay of the stream; after damage, it does not,
	// and a rebuild repairs it
	s.waitFor("the state-store to catch up", 10*time.Second, func() bool { return stateCaughtUp(s.js) })
	keys, diff, _ := s.rebuild(true)
	if keys < 5 || len(diff) != 0 {
		t.Fatalf("check: %d keys, differing %v", keys, diff)
	}
	kv, _ := s.js.KeyValue(context.Background(), events.BucketState)
	kv.Put(context.Background(), events.HostNodeKey("me", "drifty", "base", "a"), []byte(`{"status":"failed"}`))
	kv.Put(context.Background(), "host.me.bogus.node", []byte(`{}`))
	if _, diff, _ = s.rebuild(true); len(diff) != 2 {
		t.Fatalf("after damage, differing %v", diff)
	}
	if _, diff, rewritten := s.rebuild(false); len(diff) != 2 || !rewritten {
		t.Fatalf("rebuild: differing %v rewritten %v", diff, rewritten)
	}
	if _, diff, _ = s.rebuild(true); len(diff) != 0 {
		t.Fatalf("after rebuild, differing %v", diff)
	}
	if rep := s.drift(localComp(dir, "drifty", "")); rep.Counts[events.DriftOK] != 4 {
		t.Fatalf("drift after rebuild: %+v", rep.Counts)
	}
}
