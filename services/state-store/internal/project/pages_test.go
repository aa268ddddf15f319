package project_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// countingStore counts the values written to a MemStore: all, and those
// of a workflow (wf.*).
type countingStore struct {
	*project.MemStore
	values, workflow int
}

func (s *countingStore) PutAll(ctx context.Context, ws []project.Write) {
	s.values += len(ws)
	for _, w := range ws {
		if strings.HasPrefix(w.Key, "wf") {
			s.workflow++
		}
	}
	s.MemStore.PutAll(ctx, ws)
}

func putAll(t *testing.T, s project.Store, ws []project.Write) {
	t.Helper()
	s.PutAll(context.Background(), ws)
	for _, w := range ws {
		if w.Err != nil || w.NewRev == 0 {
			t.Fatalf("write %s over %d: %d, %v", w.Key, w.Rev, w.NewRev, w.Err)
		}
	}
}

func summary(id string, pages int) project.Write {
	b, _ := json.Marshal(events.WorkflowDoc{WorkflowID: id, Pages: pages})
	return project.Write{Key: project.WorkflowDocKey(id), Val: b}
}

// A flush of a thousand formulas and their nodes writes the workflow's
// pages, not a value per document; the documents read back, by a Pages
// that has cached nothing, at the revisions the writes answered.
func TestPagesWriteManyDocumentsInFewValues(t *testing.T) {
	raw := &countingStore{MemStore: project.NewMemStore()}
	s := &project.Pages{Raw: raw}
	pages := project.PagesFor(1000, 1000)
	if pages != 16 {
		t.Fatalf("PagesFor(1000, 1000) = %d, want 16", pages)
	}
	ws := []project.Write{summary("w", pages)}
	for i := range 1000 {
		f := fmt.Sprintf("f%d", i)
		ws = append(ws, project.Write{Key: project.FormulaDocKey("w", f), Val: []byte(`{"status":"ready"}`)},
			project.Write{Key: project.NodeDocKey("w", f, "n"), Val: []byte(`{"status":"running"}`)})
	}
	putAll(t, s, ws)
	if raw.values != 1+pages {
		t.Errorf("2,001 documents written as %d values, want %d (the summary and %d pages)", raw.values, 1+pages, pages)
	}
	// Each again, over the revision it was given.
	for i := range ws[1:] {
		ws[1+i].Rev, ws[1+i].Val = ws[1+i].NewRev, []byte(`{"status":"succeeded"}`)
	}
	putAll(t, s, ws[1:])
	fresh := &project.Pages{Raw: raw.MemStore}
	for _, w := range ws[1:] {
		b, rev, err := fresh.Get(context.Background(), w.Key)
		if err != nil || string(b) != `{"status":"succeeded"}` || rev != w.NewRev || rev != 2 {
			t.Fatalf("%s read back: %s at %d, %v; want the second write, at %d", w.Key, b, rev, err, w.NewRev)
		}
	}
	var keys []string
	for k := range raw.Vals {
		if !strings.HasPrefix(k, "wf-page.w.") && k != "wf.w" {
			keys = append(keys, k)
		}
	}
	if len(keys) != 0 || len(raw.Vals) != 1+pages {
		t.Errorf("the store holds %d values, %v besides the summary and pages", len(raw.Vals), keys)
	}
}

// Two replicas write documents of the same page: the one behind fails,
// reads again, and writes; neither loses the other's document.
func TestPagesTwoWritersOfOnePage(t *testing.T) {
	raw := project.NewMemStore()
	a, b := &project.Pages{Raw: raw}, &project.Pages{Raw: raw}
	ctx := context.Background()
	x, y := project.FormulaDocKey("w", "f"), project.NodeDocKey("w", "f", "n")
	putAll(t, a, []project.Write{summary("w", 1), {Key: x, Val: []byte(`"x1"`)}, {Key: y, Val: []byte(`"y1"`)}})
	if _, rev, _ := b.Get(ctx, y); rev != 1 {
		t.Fatalf("b reads %s at %d", y, rev)
	}
	putAll(t, a, []project.Write{{Key: x, Val: []byte(`"x2"`), Rev: 1}})
	ws := []project.Write{{Key: y, Val: []byte(`"y2"`), Rev: 1}}
	b.PutAll(ctx, ws)
	if ws[0].Err == nil {
		t.Fatal("b wrote its page over a's newer one")
	}
	v, rev, err := b.Get(ctx, y)
	if err != nil || string(v) != `"y1"` || rev != 1 {
		t.Fatalf("b reads %s again: %s at %d, %v", y, v, rev, err)
	}
	putAll(t, b, []project.Write{{Key: y, Val: []byte(`"y2"`), Rev: rev}})
	for key, want := range map[string]string{x: `"x2"`, y: `"y2"`} {
		if v, _, _ := (&project.Pages{Raw: raw}).Get(ctx, key); string(v) != want {
			t.Errorf("%s = %s, want %s", key, v, want)
		}
	}
	// A stale write of a document another replica moved on is refused.
	ws = []project.Write{{Key: x, Val: []byte(`"stale"`), Rev: 1}}
	b.PutAll(ctx, ws)
	if ws[0].Err == nil {
		t.Error("a write over revision 1 of a document at 2 was taken")
	}
}

// A document grown too large for a page moves to its own key: it reads
// back, is written on over the revision it answered, is read once by
// Values, and its page no longer holds it.
func TestPagesMoveALargeDocument(t *testing.T) {
	raw := project.NewMemStore()
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	key := project.NodeDocKey("w", "f", "n")
	putAll(t, s, []project.Write{summary("w", 1), {Key: key, Val: []byte(`"small"`)}})
	large := []byte(`"` + strings.Repeat("e", project.MaxPagedDoc) + `"`)
	ws := []project.Write{{Key: key, Val: large, Rev: 1}}
	putAll(t, s, ws)
	if own := ownValues(raw, "w"); len(own) != 1 || string(raw.Vals[own[0]]) != string(large) || !strings.Contains(string(raw.Vals["wf-page.w.0"]), `"f.n":{"r":2,"k":`) {
		t.Fatalf("a large document: values of their own %v; its page %s", own, raw.Vals["wf-page.w.0"])
	}
	for _, r := range []*project.Pages{s, {Raw: raw}} {
		if v, rev, err := r.Get(ctx, key); err != nil || string(v) != string(large) || rev != ws[0].NewRev {
			t.Fatalf("read back: %d bytes at %d, %v; want %d at %d", len(v), rev, err, len(large), ws[0].NewRev)
		}
	}
	putAll(t, s, []project.Write{{Key: key, Val: []byte(`"small again"`), Rev: ws[0].NewRev}})
	vals, err := s.Values(ctx, "wf.w.>")
	if err != nil || len(vals) != 1 || string(vals[key]) != `"small again"` {
		t.Fatalf("Values: %v %v", vals, err)
	}
	if own := ownValues(raw, "w"); len(own) != 0 {
		t.Errorf("values of their own left once back in the page: %v", own)
	}
	// Created large: a value of its own at once.
	big := project.NodeDocKey("w", "g", "n")
	putAll(t, s, []project.Write{{Key: big, Val: large}})
	if own := ownValues(raw, "w"); len(own) != 1 {
		t.Errorf("a document created large: values of their own %v", own)
	}
}

// ownValues are the keys of a workflow's documents' values of their own.
func ownValues(raw *project.MemStore, id string) []string {
	return pageKeys(raw, "wf-doc."+id+".")
}

// pageKeys are the keys of raw's values that start with prefix, sorted.
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

// The pages of a workflow are as many as its summary says, whoever reads
// them; RemoveWorkflow takes them with it.
func TestPagesFollowTheSummary(t *testing.T) {
	raw := project.NewMemStore()
	ctx := context.Background()
	ws := []project.Write{summary("w", 4)}
	for i := range 64 {
		ws = append(ws, project.Write{Key: project.FormulaDocKey("w", fmt.Sprintf("f%d", i)), Val: []byte(`{}`)})
	}
	putAll(t, &project.Pages{Raw: raw}, ws)
	var pages []string
	for k := range raw.Vals {
		if strings.HasPrefix(k, "wf-page.") {
			pages = append(pages, k)
		}
	}
	slices.Sort(pages)
	if !slices.Equal(pages, []string{"wf-page.w.0", "wf-page.w.1", "wf-page.w.2", "wf-page.w.3"}) {
		t.Fatalf("pages %v, want the 4 the summary says", pages)
	}
	other := &project.Pages{Raw: raw}
	for _, w := range ws[1:] {
		if v, rev, err := other.Get(ctx, w.Key); string(v) != `{}` || rev != 1 || err != nil {
			t.Fatalf("%s by another reader: %s at %d, %v", w.Key, v, rev, err)
		}
	}
	if keys, err := other.Keys(ctx, "wf.w.*"); len(keys) != 64 || err != nil {
		t.Fatalf("Keys(wf.w.*): %d keys, %v", len(keys), err)
	}
	if err := other.RemoveWorkflow(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if len(raw.Vals) != 0 {
		t.Errorf("left after RemoveWorkflow: %v", slices.Sorted(maps.Keys(raw.Vals)))
	}
}

// A rebuild's Rewrite replaces or removes a paged document whatever its
// revision, and the next write over the new revision goes through.
func TestPagesRewrite(t *testing.T) {
	raw := project.NewMemStore()
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	key := project.FormulaDocKey("w", "f")
	putAll(t, s, []project.Write{summary("w", 2), {Key: key, Val: []byte(`"a"`)}})
	if err := s.Rewrite(ctx, key, []byte(`"rebuilt"`)); err != nil {
		t.Fatal(err)
	}
	v, rev, err := s.Get(ctx, key)
	if string(v) != `"rebuilt"` || err != nil {
		t.Fatalf("after Rewrite: %s %v", v, err)
	}
	putAll(t, s, []project.Write{{Key: key, Val: []byte(`"next"`), Rev: rev}})
	if err := s.Rewrite(ctx, key, nil); err != nil {
		t.Fatal(err)
	}
	if v, rev, err := (&project.Pages{Raw: raw}).Get(ctx, key); v != nil || rev != 0 || err != nil {
		t.Fatalf("after a removing Rewrite: %s at %d, %v", v, rev, err)
	}
}

// The projection kept in pages is the projection kept a document a value:
// the same events, including a node whose error makes its document too
// large for a page and a retry, give the same documents, in fewer values.
func TestProjectionInPagesIsTheSame(t *testing.T) {
	plain := &countingStore{MemStore: project.NewMemStore()}
	paged := &countingStore{MemStore: project.NewMemStore()}
	pages := &project.Pages{Raw: paged}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	projectors := []*project.Projector{{Store: plain, Log: discard}, {Store: pages, Log: discard}}
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	var seq uint64
	var batch []*consume.Event
	flush := func() {
		for _, pr := range projectors {
			pr.Apply(context.Background(), batch, seq)
		}
		batch = nil
	}
	// In batches of 200 events, as the state-store writes a busy stream's
	// second (Projector.Hold).
	apply := func(p events.Payload) {
		t.Helper()
		seq++
		at = at.Add(time.Second)
		env, err := events.NewAt(fmt.Sprintf("ev-%d", seq), "test/1", at, p)
		if err != nil {
			t.Fatal(err)
		}
		subject := events.HostLifecycle("h")
		if w, ok := p.(*events.WorkflowEvent); ok {
			subject = events.WorkflowLifecycle(w.WorkflowID)
		}
		if batch = append(batch, &consume.Event{Envelope: env, Subject: subject, Stream: seq}); len(batch) == 200 {
			flush()
		}
	}
	const formulas = 300
	ref := events.Ref{WorkflowID: "w", Workflow: "web", Operation: dag.OpCreate, Generation: 1, Host: "h"}
	apply(&events.WorkflowEvent{Ref: ref, Status: dag.WorkflowAccepted, Formulas: map[events.FormulaState]int{dag.FormulaPending: formulas}, TotalNodes: formulas})
	apply(&events.WorkflowEvent{Ref: ref, Status: dag.WorkflowRunning})
	for i := range formulas {
		r := ref
		r.Formula = fmt.Sprintf("f%d", i)
		apply(&events.FormulaEvent{Ref: r, Status: dag.FormulaReady})
		apply(&events.FormulaEvent{Ref: r, Status: dag.FormulaRunning})
		r.Node = "n"
		apply(&events.NodeEvent{Ref: r, Status: dag.NodeRunning, Run: events.Run{Attempt: 1, StartedAt: &at}})
		end, code, msg := dag.NodeSucceeded, 0, ""
		if i%50 == 7 {
			end, code, msg = dag.NodeFailed, 1, strings.Repeat("no space left on device; ", 300)
		}
		apply(&events.NodeEvent{Ref: r, Status: end, Run: events.Run{Attempt: 1, StartedAt: &at, EndedAt: &at, ExitCode: &code, Error: msg}})
		r.Node = ""
		if end == dag.NodeSucceeded {
			apply(&events.FormulaEvent{Ref: r, Status: dag.FormulaSucceeded})
		} else {
			apply(&events.FormulaEvent{Ref: r, Status: dag.FormulaFailed, Run: events.Run{Error: msg}})
		}
	}
	apply(&events.WorkflowEvent{Ref: ref, Status: dag.WorkflowFailed})
	ref.Generation = 2
	apply(&events.WorkflowEvent{Ref: ref, Status: dag.WorkflowRunning})
	r := ref
	r.Formula, r.Node = "f7", "n"
	apply(&events.NodeEvent{Ref: r, Status: dag.NodeRunning, Run: events.Run{Attempt: 2, StartedAt: &at}})
	flush()
	got, err := pages.Values(context.Background(), ">")
	if err != nil {
		t.Fatal(err)
	}
	want := plain.Vals
	if len(got) != len(want) || len(got) < 2*formulas {
		t.Errorf("%d documents in pages, %d a value each", len(got), len(want))
	}
	for k, v := range want {
		if !jsonEqual(v, got[k]) {
			t.Errorf("%s: in pages %s, a value each %s", k, got[k], v)
		}
	}
	if own := ownValues(paged.MemStore, "w"); len(own) == 0 {
		t.Error("no document of a node with a long error is a value of its own")
	}
	if paged.workflow*3 > plain.workflow || paged.values >= plain.values {
		t.Errorf("pages wrote %d values (%d of the workflow's documents), a value each %d (%d): want a third or fewer of the workflow's",
			paged.values, paged.workflow, plain.values, plain.workflow)
	}
	t.Logf("values written: %d in pages (%d of the workflow's documents), %d a document each (%d)", paged.values, paged.workflow, plain.values, plain.workflow)
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// A page that does not decode: its documents read as bad, and a write
// to it fails as bad (the projector skips what it would change, as for a
// document that does not decode), until a rebuild's Rewrite writes it
// anew.
func TestPagesAPageThatDoesNotDecode(t *testing.T) {
	raw := project.NewMemStore()
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	a, b := project.NodeDocKey("w", "f", "a"), project.NodeDocKey("w", "f", "b")
	putAll(t, s, []project.Write{summary("w", 1), {Key: a, Val: []byte(`"a"`)}})
	if err := raw.Rewrite(ctx, "wf-page.w.0", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	s.Forget()
	for range 2 {
		if _, _, err := s.Get(ctx, a); err == nil || !strings.Contains(err.Error(), "does not decode") {
			t.Fatalf("a document of a page that does not decode: %v", err)
		}
		ws := []project.Write{{Key: a, Val: []byte(`"a2"`), Rev: 1}, {Key: b, Val: []byte(`"b"`)}}
		s.PutAll(ctx, ws)
		if ws[0].Err == nil || ws[1].Err == nil || !strings.Contains(ws[1].Err.Error(), "does not decode") {
			t.Fatalf("writes to a page that does not decode: %v, %v", ws[0].Err, ws[1].Err)
		}
	}
	for _, k := range []string{a, b} {
		if err := s.Rewrite(ctx, k, []byte(`"`+k+`"`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{a, b} {
		if v, _, err := (&project.Pages{Raw: raw}).Get(ctx, key); string(v) != `"`+key+`"` || err != nil {
			t.Errorf("%s = %s, %v", key, v, err)
		}
	}
}

// What a build before pages stored, a document a value, is read there
// until its first write, which goes to its page (as a create); a page's
// entry is read over it.
func TestPagesReadWhatCameBefore(t *testing.T) {
	raw := project.NewMemStore()
	ctx := context.Background()
	old := project.FormulaDocKey("w", "f")
	putAll(t, raw, []project.Write{{Key: project.WorkflowDocKey("w"), Val: []byte(`{"workflow_id":"w"}`)}, {Key: old, Val: []byte(`"before"`)}})
	s := &project.Pages{Raw: raw}
	v, rev, err := s.Get(ctx, old)
	if string(v) != `"before"` || rev != 0 || err != nil {
		t.Fatalf("%s: %s at %d, %v; want it, as not yet in its page (0)", old, v, rev, err)
	}
	putAll(t, s, []project.Write{{Key: old, Val: []byte(`"after"`), Rev: rev}, {Key: project.NodeDocKey("w", "f", "n"), Val: []byte(`"new"`)}})
	if v, rev, _ := (&project.Pages{Raw: raw}).Get(ctx, old); string(v) != `"after"` || rev != 1 {
		t.Errorf("%s after its write: %s at %d, want in its page at 1", old, v, rev)
	}
	vals, err := s.Values(ctx, "wf.w.>")
	if err != nil || len(vals) != 2 || string(vals[old]) != `"after"` || string(vals[project.NodeDocKey("w", "f", "n")]) != `"new"` {
		t.Errorf("Values: %s %v", vals, err)
	}
}

// A page that the flush would make too large to store sends the flush's
// documents to their own keys until it fits; every document reads back.
func TestPagesAPageTooLargeSpills(t *testing.T) {
	raw := project.NewMemStore()
	s := &project.Pages{Raw: raw}
	ws := []project.Write{summary("w", 1)}
	val := []byte(`"` + strings.Repeat("x", project.MaxPagedDoc-100) + `"`)
	for i := range 200 {
		ws = append(ws, project.Write{Key: project.NodeDocKey("w", "f", fmt.Sprintf("n%d", i)), Val: val})
	}
	putAll(t, s, ws)
	if n := len(raw.Vals["wf-page.w.0"]); n > 512<<10 || n == 0 {
		t.Fatalf("the page holds %d bytes", n)
	}
	fresh := &project.Pages{Raw: raw}
	for _, w := range ws[1:] {
		if v, rev, err := fresh.Get(context.Background(), w.Key); string(v) != string(val) || rev != w.NewRev || err != nil {
			t.Fatalf("%s: %d bytes at %d, %v; want at %d", w.Key, len(v), rev, err, w.NewRev)
		}
	}
}

// ownKeyFailing fails writes of values of their own keys (not pages).
type ownKeyFailing struct {
	*project.MemStore
	fail bool
}

func (s *ownKeyFailing) PutAll(ctx context.Context, ws []project.Write) {
	if s.fail && len(ws) > 0 && !strings.HasPrefix(ws[0].Key, "wf-page.") {
		for i := range ws {
			ws[i].Err = fmt.Errorf("refused")
		}
		return
	}
	s.MemStore.PutAll(ctx, ws)
}

// A document grown too large whose own key is not written stays in its
// page as it was: nothing of it is lost, and the write, tried again, goes
// through.
func TestPagesAFailedMoveLosesNothing(t *testing.T) {
	raw := &ownKeyFailing{MemStore: project.NewMemStore()}
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	a, b := project.NodeDocKey("w", "f", "a"), project.NodeDocKey("w", "f", "b")
	putAll(t, s, []project.Write{summary("w", 1), {Key: a, Val: []byte(`"a1"`)}, {Key: b, Val: []byte(`"b1"`)}})
	large := []byte(`"` + strings.Repeat("e", project.MaxPagedDoc) + `"`)
	raw.fail = true
	ws := []project.Write{{Key: a, Val: large, Rev: 1}, {Key: b, Val: []byte(`"b2"`), Rev: 1}}
	s.PutAll(ctx, ws)
	if ws[0].Err == nil || ws[1].Err == nil {
		t.Fatalf("answers: %v, %v; want both refused (one page)", ws[0].Err, ws[1].Err)
	}
	for key, want := range map[string]string{a: `"a1"`, b: `"b1"`} {
		if v, rev, err := s.Get(ctx, key); string(v) != want || rev != 1 || err != nil {
			t.Fatalf("%s after the failed move: %s at %d, %v", key, v, rev, err)
		}
	}
	raw.fail = false
	putAll(t, s, []project.Write{{Key: a, Val: large, Rev: 1}, {Key: b, Val: []byte(`"b2"`), Rev: 1}})
	if v, _, _ := (&project.Pages{Raw: raw.MemStore}).Get(ctx, a); string(v) != string(large) {
		t.Fatalf("%s after the move: %d bytes", a, len(v))
	}
}

// A rebuild's RewriteAll writes each page once for all of its documents:
// 2,000 documents of a 16-page workflow rewritten into an empty bucket
// are 16 page writes (and the summary), not a page write a document; a
// document removed goes from its page and from where a build before
// pages kept it; each reads back.
func TestPagesRewriteAllWritesEachPageOnce(t *testing.T) {
	raw := &countingStore{MemStore: project.NewMemStore()}
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	gone := project.NodeDocKey("w", "old", "n")
	putAll(t, raw.MemStore, []project.Write{{Key: gone, Val: []byte(`"before pages"`)}})
	vals := map[string][]byte{project.WorkflowDocKey("w"): summary("w", 16).Val}
	for i := range 1000 {
		f := fmt.Sprintf("f%d", i)
		vals[project.FormulaDocKey("w", f)] = []byte(fmt.Sprintf(`{"f":%d}`, i))
		vals[project.NodeDocKey("w", f, "n")] = []byte(fmt.Sprintf(`{"n":%d}`, i))
	}
	keys := append(slices.Sorted(maps.Keys(vals)), gone)
	raw.values = 0
	if err := s.RewriteAll(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	if raw.values != 16 || raw.Vals[project.WorkflowDocKey("w")] == nil {
		t.Errorf("2,000 documents rewritten in %d page writes, want 16; the summary %s", raw.values, raw.Vals[project.WorkflowDocKey("w")])
	}
	fresh := &project.Pages{Raw: raw.MemStore}
	for k, v := range vals {
		if got, _, err := fresh.Get(ctx, k); err != nil || !jsonEqual(got, v) && k != project.WorkflowDocKey("w") {
			t.Fatalf("%s: %s, %v; want %s", k, got, err, v)
		}
	}
	if v, _, err := fresh.Get(ctx, gone); v != nil || err != nil {
		t.Errorf("%s after its removal: %s, %v", gone, v, err)
	}
	if _, left := raw.Vals[gone]; left {
		t.Errorf("the copy a build before pages left of %s is still there", gone)
	}
}
