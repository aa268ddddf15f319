package drift

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

func TestCompare(t *testing.T) {
	c := &dag.Composition{Name: "d", Hosts: map[string]dag.Host{"h": {Transport: dag.TransportLocal}, "g": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{
			{ID: "f", Server: "h", Nodes: []dag.Node{{Name: "same", Run: "a"}, {Name: "edited", Run: "b2"}, {Name: "never", Run: "c"}, {Name: "failed", Run: "d"}, {Name: "deleted", Run: "e"}}},
		}}
	p, err := dag.NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	hash := func(run string) string { return dag.SpecHash(&dag.Node{Run: run}) }
	done := func(hn events.HostNode, spec string) events.HostNode {
		hn.InPlace = &events.InPlace{Status: hn.Status, SpecHash: spec, WorkflowID: "w1"}
		return hn
	}
	rec := []events.HostNode{
		// Another composition's, on the same host with the same ids: not d's.
		done(events.HostNode{Host: "h", Workflow: "other", Formula: "f", Node: "never", Status: dag.NodeSucceeded, Operation: dag.OpCreate, SpecHash: hash("c")}, hash("c")),
		done(events.HostNode{Host: "h", Workflow: "other", Formula: "f", Node: "edited", Status: dag.NodeSucceeded, Operation: dag.OpCreate, SpecHash: hash("b2")}, hash("b2")),
		done(events.HostNode{Host: "h", Workflow: "other", Formula: "f", Node: "theirs", Status: dag.NodeSucceeded, Operation: dag.OpCreate, SpecHash: hash("t")}, hash("t")),
		done(events.HostNode{Host: "h", Workflow: "d", Formula: "f", Node: "same", Status: dag.NodeSucceeded, Operation: dag.OpCreate, SpecHash: hash("a")}, hash("a")),
		done(events.HostNode{Host: "h", Workflow: "d", Formula: "f", Node: "edited", Status: dag.NodeSucceeded, Operation: dag.OpCreate, SpecHash: hash("b1")}, hash("b1")),
		{Host: "h", Workflow: "d", Formula: "f", Node: "failed", Status: dag.NodeFailed, Operation: dag.OpCreate, SpecHash: hash("d")},
		{Host: "h", Workflow: "d", Formula: "f", Node: "deleted", Status: dag.NodeSucceeded, Operation: dag.OpDelete, SpecHash: hash("e")},
		done(events.HostNode{Host: "h", Workflow: "d", Formula: "old", Node: "gone", Status: dag.NodeSkipped, Operation: dag.OpCreate, SpecHash: hash("z")}, hash("z")),
		{Host: "h", Workflow: "d", Formula: "old", Node: "removed", Status: dag.NodeSucceeded, Operation: dag.OpDelete},
		done(events.HostNode{Host: "elsewhere", Workflow: "d", Formula: "x", Node: "y", Status: dag.NodeSucceeded, Operation: dag.OpCreate}, "s"),
	}
	q := events.DriftQueryOf(p)
	rep := Compare(&q, rec)
	want := map[string]string{"f/same": "ok", "f/edited": "changed", "f/never": "missing", "f/failed": "missing", "f/deleted": "missing", "old/gone": "orphaned"}
	if len(rep.Items) != len(want) {
		t.Fatalf("items %+v", rep.Items)
	}
	for _, it := range rep.Items {
		if want[it.Formula+"/"+it.Node] != it.Drift {
			t.Errorf("%s/%s = %s, want %s", it.Formula, it.Node, it.Drift, want[it.Formula+"/"+it.Node])
		}
	}
	if rep.Counts["ok"] != 1 || rep.Counts["changed"] != 1 || rep.Counts["missing"] != 3 || rep.Counts["orphaned"] != 1 {
		t.Errorf("counts %v", rep.Counts)
	}
}
