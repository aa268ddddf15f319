package project_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// short is each StreamFinding in short: kind, what, sequences.
func short(fs []events.StreamFinding) []string {
	var out []string
	for _, f := range fs {
		what := f.Formula
		if f.Node != "" {
			what += "/" + f.Node
		}
		out = append(out, fmt.Sprintf("%s %s %v", f.Kind, what, f.Seqs))
	}
	return out
}

// The audit of a replay finds each event stored twice and each
// transition stored after one it comes before in the same run, and
// nothing in what a sound stream holds: retries, an attempt announced
// again, the planner's word that no executor took a formula crossing the
// executor's start, the planner's and an executor's cancel of a node that
// never started, a retry's generation, a late settle of an earlier
// generation.
func TestAuditFindsDuplicatesAndOutOfOrder(t *testing.T) {
	f := newFeed(t)
	f.audit = project.NewAudit()
	r := f.run("wf-1", 1)
	r.workflow("w-acc", dag.WorkflowAccepted, "")                    // 1
	r.workflow("w-run", dag.WorkflowRunning, "")                     // 2
	r.formula("f-ready", dag.FormulaReady)                           // 3
	fRunning := r.formula("f-run", dag.FormulaRunning)               // 4
	r.formula("f-ready-unclaimed", dag.FormulaReady)                 // 5: crossed the executor's running
	aRunning := r.node("a-run-1", "a", dag.NodeRunning, 1, false)    // 6
	aSucceeded := r.node("a-ok-1", "a", dag.NodeSucceeded, 1, false) // 7
	r.node("b-run-1", "b", dag.NodeRunning, 1, false)                // 8
	r.node("b-retry-1", "b", dag.NodeFailed, 1, true)                // 9
	r.node("b-slot-2", "b", dag.NodeRunning, 2, false)               // 10: waiting for a slot
	r.node("b-run-2", "b", dag.NodeRunning, 2, false)                // 11
	r.node("b-ok-2", "b", dag.NodeSucceeded, 2, false)               // 12
	r.node("c-cancel-planner", "c", dag.NodeCancelled, 0, false)     // 13
	r.node("c-cancel-executor", "c", dag.NodeCancelled, 0, false)    // 14
	r.formula("f-ok", dag.FormulaSucceeded)                          // 15
	r.workflow("w-ok", dag.WorkflowSucceeded, "")                    // 16
	f.store(aSucceeded)                                              // 17
	f.store(fRunning)                                                // 18
	f.store(aRunning)                                                // 19
	r.node("a-run-1-late", "a", dag.NodeRunning, 1, false)           // 20
	r2 := f.run("wf-1", 2)
	r2.workflow("w-run-2", dag.WorkflowRunning, "op")       // 21
	r2.node("c-run-3", "c", dag.NodeRunning, 3, false)      // 22
	r.node("c-settled-late", "c", dag.NodeFailed, 1, false) // 23: of generation 1, settled late
	r2.node("c-ok-3", "c", dag.NodeSucceeded, 3, false)     // 24
	r2.workflow("w-ok-2", dag.WorkflowSucceeded, "")        // 25
	f.store(aRunning)                                       // 26: stored again once more
	r.workflow("w-run-late", dag.WorkflowRunning, "")       // 27: generation 1, after its end: history

	got := short(f.audit.Findings())
	want := []string{
		"duplicate f/a [7 17]",
		"out_of_order f [15 18]",
		"duplicate f [4 18]",
		"out_of_order f/a [7 19]",
		"duplicate f/a [6 19]",
		"out_of_order f/a [7 20]",
		"out_of_order f/a [7 26]",
		"duplicate f/a [6 26]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, fd := range f.audit.Findings() {
		if fd.WorkflowID != "wf-1" || fd.Detail == "" {
			t.Errorf("finding without its workflow or detail: %+v", fd)
		}
	}
	if d := f.audit.Findings()[3].Detail; d != "gantry.node.running (generation 1, attempt 1) stored after gantry.node.succeeded (generation 1, attempt 1)" {
		t.Errorf("out of order detail: %q", d)
	}
}

// The fold of the stream is held against the executors' records: a node
// the stream leaves running in an ended workflow, or ended otherwise than
// recorded, or succeeded with no record, is a finding; records of another
// generation, and nodes still at work in a running workflow, are not.
func TestAuditHoldsTheStreamAgainstTheRecords(t *testing.T) {
	f := newFeed(t)
	r := f.run("wf-1", 1)
	r.workflow("w-acc", dag.WorkflowAccepted, "")
	r.workflow("w-run", dag.WorkflowRunning, "")
	r.formula("f-run", dag.FormulaRunning)
	r.node("a-run", "a", dag.NodeRunning, 1, false)
	r.node("a-ok", "a", dag.NodeSucceeded, 1, false)
	r.node("b-run", "b", dag.NodeRunning, 1, false) // its succeeded never reached the stream
	r.node("c-run", "c", dag.NodeRunning, 1, false)
	r.node("c-fail", "c", dag.NodeFailed, 1, false)
	r.node("d-run", "d", dag.NodeRunning, 1, false)
	r.node("d-ok", "d", dag.NodeSucceeded, 1, false) // no record
	r.node("e-run", "e", dag.NodeRunning, 1, false)
	r.node("e-ok", "e", dag.NodeSucceeded, 1, false) // recorded by a retry since
	r.workflow("w-ok", dag.WorkflowSucceeded, "")
	w2 := f.run("wf-2", 1)
	w2.workflow("w2-acc", dag.WorkflowAccepted, "")
	w2.node("x-run", "x", dag.NodeRunning, 1, false) // still running, recorded succeeded already
	recs := &eventbustest.MemoryBucket[events.NodeRecord]{}
	rec := func(id, node string, st dag.NodeState, attempt, gen int) {
		recs.Set(events.NodeKey(id, dag.OpCreate, "f", node), events.NodeRecord{Status: st, Attempt: attempt, Generation: gen, GenAttempts: attempt})
	}
	rec("wf-1", "a", dag.NodeSucceeded, 1, 1)
	rec("wf-1", "b", dag.NodeSucceeded, 1, 1)
	rec("wf-1", "c", dag.NodeSucceeded, 1, 1)
	rec("wf-1", "e", dag.NodeRunning, 2, 2)
	rec("wf-2", "x", dag.NodeSucceeded, 1, 1)
	a := project.NewAudit()
	if err := a.Records(context.Background(), f.mem, recs); err != nil {
		t.Fatal(err)
	}
	got := short(a.Findings())
	want := []string{"contradicts_record f/b [6]", "contradicts_record f/c [8]", "contradicts_record f/d [10]"}
	if !slices.Equal(got, want) {
		t.Errorf("findings\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, fd := range a.Findings() {
		t.Log(fd.Detail)
	}
}
