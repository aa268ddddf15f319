package project_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// formulaEvent applies one formula event of generation gen.
func (w *wf) formulaEvent(st dag.FormulaState, gen int, why string) {
	f := w.f
	f.t.Helper()
	f.seq++
	ev := &events.FormulaEvent{Ref: events.Ref{WorkflowID: w.id, Workflow: w.name, Formula: w.formula, Host: w.host, Operation: w.op, Generation: gen},
		Status: st, Run: events.Run{Error: why}}
	env, err := events.NewAt(fmt.Sprintf("ev-%d", f.seq), "test/1", f.at, ev)
	if err != nil {
		f.t.Fatal(err)
	}
	f.p.Apply(context.Background(), []*consume.Event{{Envelope: env, Subject: events.HostLifecycle(w.host), Stream: f.seq}}, f.seq)
}

func (f *feed) formulaDoc(id string) events.FormulaDoc {
	f.t.Helper()
	var fd events.FormulaDoc
	if err := json.Unmarshal(f.mem.Vals[project.FormulaDocKey(id, "f")], &fd); err != nil {
		f.t.Fatal(err)
	}
	return fd
}

// The planner's word that no executor has taken a formula's work (the
// formula ready again, with the reason) shows on the formula; once an
// executor says it runs it, the reason goes. Stored after the executor's
// running (the two crossed), it changes nothing; in a retry it shows
// again.
func TestUnclaimedFormulaProjected(t *testing.T) {
	f := newFeed(t)
	w := f.workflow("w", "wf-1", dag.OpCreate)
	const why = "no executor serves zone nowhere (its dispatch is unclaimed after 30s)"
	w.formulaEvent(dag.FormulaReady, 1, "")
	w.formulaEvent(dag.FormulaReady, 1, why)
	if fd := f.formulaDoc("wf-1"); fd.Status != dag.FormulaReady || fd.Error != why {
		t.Fatalf("unclaimed: %+v", fd)
	}
	w.formulaEvent(dag.FormulaRunning, 1, "")
	if fd := f.formulaDoc("wf-1"); fd.Status != dag.FormulaRunning || fd.Error != "" {
		t.Fatalf("taken: %+v", fd)
	}
	w.formulaEvent(dag.FormulaReady, 1, why) // crossed the executor's running
	if fd := f.formulaDoc("wf-1"); fd.Status != dag.FormulaRunning || fd.Error != "" {
		t.Fatalf("a late unclaimed moved the formula back: %+v", fd)
	}
	w.formulaEvent(dag.FormulaReady, 2, why)
	if fd := f.formulaDoc("wf-1"); fd.Status != dag.FormulaReady || fd.Error != why || fd.Generation != 2 {
		t.Fatalf("retry: %+v", fd)
	}
}
