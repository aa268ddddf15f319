package project_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
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

// pageKeys are the keys of raw's values that start with prefix.
func pageKeys(raw *project.MemStore, prefix string) []string {
	var keys []string
	for k := range raw.Vals {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// A replica of a build before unpaged workflows reads the summary's -1 as
// no count and writes the documents into pages (DefaultPages), beside the
// values of their own: those page entries are left out of what the
// workflow reads, and a rebuild's Rewrite of the document removes its
// stray entry.
func TestPagesUnpagedWorkflowLeavesOutStrayPageEntries(t *testing.T) {
	raw := project.NewMemStore()
	ctx := context.Background()
	s := &project.Pages{Raw: raw}
	key := project.NodeDocKey("w", "f", "n")
	putAll(t, s, []project.Write{summary("w", project.Unpaged), {Key: key, Val: []byte(`"new build"`)}})
	// What the build before wrote: the summary read as having no count
	// (as in a bucket whose summary has none), the document in a page.
	before := project.NewMemStore()
	putAll(t, before, []project.Write{{Key: project.WorkflowDocKey("w"), Val: []byte(`{"workflow_id":"w"}`)}})
	putAll(t, &project.Pages{Raw: before}, []project.Write{{Key: key, Val: []byte(`"old build"`)}})
	stray := pageKeys(before, "wf-page.w.")
	if len(stray) != 1 {
		t.Fatalf("the test's stray page entry was not written: %v", pageKeys(before, ""))
	}
	raw.Vals[stray[0]] = before.Vals[stray[0]]
	fresh := &project.Pages{Raw: raw}
	vals, err := fresh.Values(ctx, "wf.w.>")
	if err != nil || string(vals[key]) != `"new build"` {
		t.Errorf("Values: %s (%v), want the value of its own, not the stray page entry", vals[key], err)
	}
	if err := fresh.Rewrite(ctx, key, []byte(`"rebuilt"`)); err != nil {
		t.Fatal(err)
	}
	if pg := raw.Vals[stray[0]]; strings.Contains(string(pg), "old build") {
		t.Errorf("the stray page entry is still there after a rebuild's Rewrite: %s", pg)
	}
	if string(raw.Vals[key]) != `"rebuilt"` {
		t.Errorf("the value of its own after Rewrite: %s", raw.Vals[key])
	}
}

// A summary write that fails (another replica's came first) teaches a
// Pages nothing: the count it holds is read from the one stored.
func TestPagesLearnOnlyFromAStoredSummary(t *testing.T) {
	raw := project.NewMemStore()
	ctx := context.Background()
	putAll(t, raw, []project.Write{summary("w", 4)}) // another replica's, first
	s := &project.Pages{Raw: raw}
	refused := []project.Write{summary("w", project.Unpaged)}
	s.PutAll(ctx, refused)
	if refused[0].Err == nil {
		t.Fatal("the second create of the summary went through")
	}
	putAll(t, s, []project.Write{{Key: project.NodeDocKey("w", "f", "n"), Val: []byte(`"x"`)}})
	if p := pageKeys(raw, "wf-page.w."); len(p) != 1 {
		t.Errorf("the document went to pages %v, want one of the stored summary's 4 (not a value of its own)", p)
	}
}

// A rebuild into a bucket that lost the summary writes it with the count
// the replay gave it: an unpaged workflow stays unpaged.
func TestPagesRebuiltSummaryKeepsItsCountWhenNoneIsStored(t *testing.T) {
	raw := project.NewMemStore()
	ctx := context.Background()
	s := &project.Pages{Raw: raw}
	if err := s.Rewrite(ctx, project.WorkflowDocKey("w"), summary("w", project.Unpaged).Val); err != nil {
		t.Fatal(err)
	}
	if err := s.Rewrite(ctx, project.NodeDocKey("w", "f", "n"), []byte(`"x"`)); err != nil {
		t.Fatal(err)
	}
	if p := pageKeys(raw, "wf-page."); len(p) != 0 || string(raw.Vals[project.NodeDocKey("w", "f", "n")]) != `"x"` {
		t.Errorf("pages %v, the document's own value %s: want no page, the value of its own", p, raw.Vals[project.NodeDocKey("w", "f", "n")])
	}
}
