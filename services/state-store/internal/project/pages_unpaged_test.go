package project_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// A workflow of more documents than MaxPagedDocuments keeps each a value
// of its own: a flush of its run would otherwise rewrite about all of its
// pages each time. Up to it, pages as many as PagesFor says.
func TestPagesForALargeWorkflowIsUnpaged(t *testing.T) {
	for _, c := range []struct{ formulas, nodes, want int }{
		{1, 1, 1}, {1000, 1000, 16}, {2048, 2048, 32}, {2048, 2049, project.Unpaged}, {10000, 50000, project.Unpaged},
	} {
		if got := project.PagesFor(c.formulas, c.nodes); got != c.want {
			t.Errorf("PagesFor(%d, %d) = %d, want %d", c.formulas, c.nodes, got, c.want)
		}
	}
}

// The documents of an unpaged workflow are values of their own keys,
// written over their KV revision, read back by any reader (which learns
// from the summary), listed, and rewritten by a rebuild.
func TestPagesUnpagedWorkflowDocumentsAreValues(t *testing.T) {
	raw := &countingStore{MemStore: project.NewMemStore()}
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	ws := []project.Write{summary("w", project.Unpaged)}
	for i := range 10 {
		ws = append(ws, project.Write{Key: project.NodeDocKey("w", fmt.Sprintf("f%d", i), "n"), Val: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	putAll(t, s, ws)
	if raw.values != len(ws) {
		t.Errorf("%d documents and the summary written as %d values, want %d", len(ws)-1, raw.values, len(ws))
	}
	if pages := pageKeys(raw.MemStore, "wf-page."); len(pages) != 0 {
		t.Errorf("pages written: %v", pages)
	}
	fresh := &project.Pages{Raw: raw.MemStore}
	for _, w := range ws[1:] {
		if b := raw.Vals[w.Key]; string(b) != string(w.Val) {
			t.Errorf("%s at its own key: %s, want %s", w.Key, b, w.Val)
		}
		if v, rev, err := fresh.Get(ctx, w.Key); string(v) != string(w.Val) || rev != w.NewRev || err != nil {
			t.Errorf("%s read again: %s at %d, %v; want %s at %d", w.Key, v, rev, err, w.Val, w.NewRev)
		}
	}
	if vals, err := fresh.Values(ctx, "wf.w.>"); len(vals) != 10 || err != nil {
		t.Errorf("Values(wf.w.>): %d documents, %v", len(vals), err)
	}
	// A write over a revision it no longer has fails; over its own, it goes.
	stale := []project.Write{{Key: ws[1].Key, Val: []byte(`"late"`), Rev: ws[1].NewRev + 100}}
	fresh.PutAll(ctx, stale)
	if stale[0].Err == nil {
		t.Errorf("a write over another revision went through")
	}
	putAll(t, fresh, []project.Write{{Key: ws[1].Key, Val: []byte(`"next"`), Rev: ws[1].NewRev}})
	if err := fresh.Rewrite(ctx, ws[2].Key, []byte(`"rebuilt"`)); err != nil || string(raw.Vals[ws[2].Key]) != `"rebuilt"` {
		t.Errorf("Rewrite: %v; the value %s", err, raw.Vals[ws[2].Key])
	}
	if err := fresh.Rewrite(ctx, project.WorkflowDocKey("w"), []byte(`{"workflow_id":"w","status":"succeeded"}`)); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Pages int `json:"pages"`
	}
	if json.Unmarshal(raw.Vals[project.WorkflowDocKey("w")], &doc); doc.Pages != project.Unpaged {
		t.Errorf("a rebuilt summary says pages %d, want %d (unpaged, as it was)", doc.Pages, project.Unpaged)
	}
}

// The projector gives a workflow whose accepted event counts more
// documents than MaxPagedDocuments an unpaged summary, and its formula
// and node documents values of their own.
func TestProjectorLeavesALargeWorkflowUnpaged(t *testing.T) {
	mem := project.NewMemStore()
	p := &project.Projector{Store: &project.Pages{Raw: mem}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ref := events.Ref{WorkflowID: "big", Workflow: "fleet", Operation: dag.OpCreate, Generation: 1}
	var seq uint64
	apply := func(subject string, payload events.Payload) {
		t.Helper()
		seq++
		env, err := events.NewAt(fmt.Sprintf("ev-%d", seq), "test/1", at.Add(time.Duration(seq)*time.Second), payload)
		if err != nil {
			t.Fatal(err)
		}
		p.Apply(context.Background(), []*consume.Event{{Envelope: env, Subject: subject, Stream: seq}}, seq)
	}
	apply(events.WorkflowLifecycle("big"), &events.WorkflowEvent{Ref: ref, Status: dag.WorkflowAccepted,
		Formulas: map[dag.FormulaState]int{dag.FormulaPending: 1000}, TotalNodes: 5000})
	fref := ref
	fref.Formula, fref.Host = "f1", "h1"
	apply(events.HostLifecycle("h1"), &events.FormulaEvent{Ref: fref, Status: dag.FormulaReady})
	nref := fref
	nref.Node = "n1"
	apply(events.HostLifecycle("h1"), &events.NodeEvent{Ref: nref, Status: dag.NodeRunning})
	var doc struct {
		Pages int `json:"pages"`
	}
	if err := json.Unmarshal(mem.Vals[project.WorkflowDocKey("big")], &doc); err != nil || doc.Pages != project.Unpaged {
		t.Fatalf("summary %s: pages %d, want %d (%v); values %v", mem.Vals[project.WorkflowDocKey("big")], doc.Pages, project.Unpaged, err, pageKeys(mem, ""))
	}
	for _, k := range []string{project.FormulaDocKey("big", "f1"), project.NodeDocKey("big", "f1", "n1")} {
		if _, ok := mem.Vals[k]; !ok {
			t.Errorf("%s is not a value of its own; values: %v", k, strings.Join(pageKeys(mem, ""), " "))
		}
	}
}
