package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A newer run whose a/x record does not decode makes the next submission
// run a/x: prune must keep that run (a bad record is as recent as its
// run's last start), or the next submission would skip a/x on the older
// run's record.
func TestPruneKeepsTheRunWhoseBadRecordDecides(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t)
	h.e.Events = &fakeEvents{}
	old := ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded, "b/y": dag.NodeSucceeded}, nil)
	newer := ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded}, map[string]string{"a/x": "sha256:other"})
	h.nodes.SetRaw(events.NodeKey(newer, dag.OpCreate, "a", "x"), []byte("\x00 not a record"))
	finish(t, h, old, dag.WorkflowSucceeded)
	finish(t, h, newer, dag.WorkflowSucceeded)
	h.stored()
	reply, err := h.e.Prune(ctx, PruneRule{Keep: 0, HasKeep: true})
	must(t, err)
	for _, p := range reply.Pruned {
		if p.WorkflowID == newer {
			t.Errorf("pruned %s, the run whose (bad) a/x record makes a submission run a/x", newer)
		}
	}
	h.stored()
	must(t, h.submit(chain))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1")
}

// The executor's clock is a few seconds ahead of the planner's. Run 1
// created a/x with chain's spec (b/y failed); run 2 was accepted right
// after and created a/x with another spec (the host has that); run 1 is
// retried and reruns only b/y. Run 1's a/x start (executor clock) is after
// run 2's acceptance (planner clock): the records are ordered on the
// planner's clock alone (the generation that wrote them), and a/x runs.
func TestExecutorsClockDoesNotOrderTheRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const skew = 5 * time.Second
	t0 := h.e.Now()
	h.e.Now = func() time.Time { return t0 }
	must(t, h.submit(chain))
	older := h.id
	x1, y1 := t0.Add(57*time.Second+skew), t0.Add(55*time.Second+skew) // executor clock
	spec := specs(t, h, chain)
	h.nodes.Set(events.NodeKey(older, dag.OpCreate, "a", "x"), events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: spec["a/x"], StartedAt: &x1})
	h.nodes.Set(events.NodeKey(older, dag.OpCreate, "b", "y"), events.NodeRecord{Status: dag.NodeFailed, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: spec["b/y"], StartedAt: &y1})
	t1 := t0.Add(time.Minute) // run 2 accepted (planner clock)
	h.e.Now = func() time.Time { return t1 }
	must(t, h.submit(chain))
	x2 := t1.Add(10*time.Second + skew)
	h.nodes.Set(events.NodeKey(h.id, dag.OpCreate, "a", "x"), events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "sha256:other", StartedAt: &x2})
	// Run 1 retried an hour later: b/y runs again and succeeds.
	later := t0.Add(time.Hour)
	h.e.Now = func() time.Time { return later }
	rec, _, err := h.workflows.Get(context.Background(), older)
	must(t, err)
	rec.Generation = 2 // retried
	h.e.activated(context.Background(), &rec)
	y2 := later.Add(time.Second + skew)
	h.nodes.Set(events.NodeKey(older, dag.OpCreate, "b", "y"), events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 2, Generation: 2, GenAttempts: 1, SpecHash: spec["b/y"], StartedAt: &y2})
	h.stored()
	must(t, h.submit(chain))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1")
}

// Run 1 skipped a/x (in place with chain's spec; a skip's record has no
// start time) and failed b/y; run 2 then created a/x with another spec;
// run 1 is retried and reruns only b/y. Run 1 is read first, but its a/x
// record is as old as its first generation: run 2's decides, and a/x
// runs.
func TestARetriedRunsSkipRecordIsNotTheLatest(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded, "b/y": dag.NodeSucceeded}, nil)
	older := ran(t, h, chain, map[string]dag.NodeState{"b/y": dag.NodeFailed}, nil)
	spec := specs(t, h, chain)
	h.nodes.Set(events.NodeKey(older, dag.OpCreate, "a", "x"), events.NodeRecord{Status: dag.NodeSkipped, Attempt: 0, Generation: 1, SpecHash: spec["a/x"]})
	ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded, "b/y": dag.NodeSucceeded}, map[string]string{"a/x": "sha256:other"})
	rec, _, err := h.workflows.Get(context.Background(), older)
	must(t, err)
	later := h.e.Now().Add(time.Hour)
	h.e.Now = func() time.Time { return later }
	rec.Generation = 2 // retried
	h.e.activated(context.Background(), &rec)
	h.nodes.Set(events.NodeKey(older, dag.OpCreate, "b", "y"), events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 2, Generation: 2, GenAttempts: 1, SpecHash: spec["b/y"], StartedAt: &later})
	h.stored()
	must(t, h.submit(chain))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1")
}

// A newer run that never reached the host (its records NeverStarted) is
// not the latest on its nodes for prune either: alreadyDone passes over it
// to the older run, which prune must keep, or the next submission would
// run nodes that are in place.
func TestPruneKeepsTheRunAlreadyDoneReadsPastANeverStartedOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t)
	h.e.Events = &fakeEvents{}
	all := map[string]dag.NodeState{"a/x": dag.NodeSucceeded, "b/y": dag.NodeSucceeded}
	old := ran(t, h, chain, all, nil)
	failed := map[string]dag.NodeState{"a/x": dag.NodeFailed, "b/y": dag.NodeFailed}
	newer := ran(t, h, chain, failed, nil)
	neverStarted(t, h, newer, failed)
	finish(t, h, old, dag.WorkflowSucceeded)
	finish(t, h, newer, dag.WorkflowFailed)
	h.stored()
	reply, err := h.e.Prune(ctx, PruneRule{Keep: 0, HasKeep: true})
	must(t, err)
	for _, p := range reply.Pruned {
		if p.WorkflowID == old {
			t.Errorf("pruned %s, the run a submission skips a/x and b/y on", old)
		}
	}
}
