package project_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// keys lists the documents, without the checkpoint.
func (f *feed) keys() string {
	var ks []string
	for k := range f.mem.Vals {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, " ")
}

// pruned applies the planner's pruned event of workflow w.
func (w *wf) pruned() {
	f := w.f
	f.t.Helper()
	f.seq++
	env, err := events.NewAt(fmt.Sprintf("ev-%d", f.seq), "planner/1", f.at, &events.WorkflowPruned{
		Ref: events.Ref{WorkflowID: w.id, Workflow: w.name, Operation: w.op}, FinalStatus: dag.WorkflowSucceeded})
	if err != nil {
		f.t.Fatal(err)
	}
	f.p.Apply(context.Background(), []*consume.Event{{Envelope: env, Subject: events.WorkflowLifecycle(w.id), Stream: f.seq}}, f.seq)
}

// A pruned workflow's documents go, and nothing else: not another
// workflow's, nor the per-host projection that drift and gantry state read.
func TestPrunedWorkflowDocumentsGo(t *testing.T) {
	f := newFeed(t)
	old := f.workflow("c", "w1", dag.OpCreate)
	old.ran("x", "s1", dag.NodeSucceeded)
	old.ran("y", "s1", dag.NodeSucceeded)
	latest := f.workflow("c", "w2", dag.OpCreate)
	latest.ran("x", "s1", dag.NodeSucceeded)
	hostBefore, _ := f.docs()
	for range 2 { // again: nothing more goes
		old.pruned()
	}
	got := f.keys()
	for _, k := range strings.Fields(got) {
		if strings.HasPrefix(k, "wf.w1") {
			t.Errorf("document %s of the pruned workflow left", k)
		}
	}
	for _, want := range []string{"wf.w2.f.x", "host.h.c.f.x", "host.h.c.f.y"} {
		if !slices.Contains(strings.Fields(got), want) {
			t.Errorf("document %s gone; left: %s", want, got)
		}
	}
	hostAfter, _ := f.docs()
	if fmt.Sprint(hostBefore) != fmt.Sprint(hostAfter) {
		t.Errorf("per-host documents changed:\n%v\n%v", hostBefore, hostAfter)
	}
}
