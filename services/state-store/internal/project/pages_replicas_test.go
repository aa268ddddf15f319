package project_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

var largeDoc = []byte(`"` + strings.Repeat("L", project.MaxPagedDoc) + `"`)

// The page cache reaches its bound (and is emptied) between two writes of
// one page in one flush: both writes are in the page written.
func TestPagesCacheBoundReachedInAFlush(t *testing.T) {
	raw := project.NewMemStore()
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	putAll(t, s, []project.Write{summary("x", 1), summary("y", 1)})
	for i := range 1023 { // 1,023 pages cached
		if _, _, err := s.Get(ctx, project.FormulaDocKey(fmt.Sprintf("w%d", i), "f")); err != nil {
			t.Fatal(err)
		}
	}
	ws := []project.Write{
		{Key: project.FormulaDocKey("x", "a"), Val: []byte(`"a"`)}, // wf-page.x.0: the 1,024th
		{Key: project.FormulaDocKey("y", "b"), Val: []byte(`"b"`)}, // resets the cache
		{Key: project.FormulaDocKey("x", "c"), Val: []byte(`"c"`)}, // wf-page.x.0 read again
	}
	putAll(t, s, ws) // every write answered as written
	for _, w := range ws {
		if v, _, _ := (&project.Pages{Raw: raw}).Get(ctx, w.Key); string(v) != string(w.Val) {
			t.Errorf("%s answered written at %d, reads %s", w.Key, w.NewRev, v)
		}
	}
}

// A replica whose page is stale grows a document another replica has
// already made a value of its own: its write fails, and what the other
// wrote stays what is read.
func TestPagesAStaleReplicaMovesNothing(t *testing.T) {
	raw := project.NewMemStore()
	a, b := &project.Pages{Raw: raw}, &project.Pages{Raw: raw}
	ctx := context.Background()
	x := project.NodeDocKey("w", "f", "n")
	putAll(t, a, []project.Write{summary("w", 1), {Key: x, Val: []byte(`"small"`)}})
	if _, rev, _ := b.Get(ctx, x); rev != 1 {
		t.Fatal(rev)
	}
	ahead := append([]byte(`"ahead`), largeDoc[1:]...)
	putAll(t, a, []project.Write{{Key: x, Val: ahead, Rev: 1}}) // a: moved, page without x
	behind := append([]byte(`"behind`), largeDoc[1:]...)
	ws := []project.Write{{Key: x, Val: behind, Rev: 1}}
	b.PutAll(ctx, ws)
	t.Logf("b's write: %v", ws[0].Err)
	if v, _, _ := (&project.Pages{Raw: raw}).Get(ctx, x); !strings.HasPrefix(string(v), `"ahead`) {
		t.Errorf("a's written document replaced by b's refused one: %s...", v[:8])
	}
}

// A second create (revision 0) of a document fails, whether the first
// made it a value of its own or kept it in its page.
func TestPagesASecondCreateFails(t *testing.T) {
	for _, firstLarge := range []bool{true, false} {
		raw := project.NewMemStore()
		a, b := &project.Pages{Raw: raw}, &project.Pages{Raw: raw}
		ctx := context.Background()
		x := project.NodeDocKey("w", "f", "n")
		putAll(t, a, []project.Write{summary("w", 1), {Key: project.NodeDocKey("w", "f", "other"), Val: []byte(`1`)}})
		if v, _, _ := b.Get(ctx, x); v != nil { // b reads: absent
			t.Fatal(v)
		}
		first, second := largeDoc, []byte(`"small"`)
		if !firstLarge {
			first, second = second, first
		}
		putAll(t, a, []project.Write{{Key: x, Val: first}})
		ws := []project.Write{{Key: x, Val: second}}
		b.PutAll(ctx, ws)
		if ws[0].Err == nil {
			t.Errorf("created large first %v: a second create of %s succeeded (page %v, own key %v)", firstLarge, x,
				strings.Contains(string(raw.Vals["wf-page.w.0"]), `"f.n"`), raw.Vals[x] != nil)
		}
	}
}

// recording records the keys written, in order.
type recording struct {
	*project.MemStore
	order []string
}

func (s *recording) PutAll(ctx context.Context, ws []project.Write) {
	for _, w := range ws {
		s.order = append(s.order, w.Key)
	}
	s.MemStore.PutAll(ctx, ws)
}

// A page is stored where its first write was: before the summary written
// after it (a workflow's end comes after its formulas' and nodes'), and
// before a per-host document written between two of its writes.
func TestPagesOrderOfAFlush(t *testing.T) {
	raw := &recording{MemStore: project.NewMemStore()}
	s := &project.Pages{Raw: raw}
	putAll(t, s, []project.Write{summary("w", 1)})
	raw.order = nil
	putAll(t, s, []project.Write{
		{Key: project.NodeDocKey("w", "f", "a"), Val: []byte(`"event 10"`)},
		{Key: "host.h.web.f.a", Val: []byte(`"event 11"`)},
		{Key: project.NodeDocKey("w", "f", "b"), Val: []byte(`"event 12"`)},
		{Key: project.WorkflowDocKey("w"), Val: []byte(`{"workflow_id":"w","status":"succeeded"}`), Rev: 1},
	})
	if want := []string{"wf-page.w.0", "host.h.web.f.a", "wf.w"}; !slices.Equal(raw.order, want) {
		t.Errorf("stored %v, want %v", raw.order, want)
	}
}

// Values reads pages, then the values of their own they name: a
// document made a value of its own in between is read all the same.
type hooked struct {
	*project.MemStore
	after func()
}

func (s *hooked) Values(ctx context.Context, f string) (map[string][]byte, error) {
	out, err := s.MemStore.Values(ctx, f)
	if h := s.after; h != nil {
		s.after = nil
		h()
	}
	return out, err
}

func TestPagesValuesWhileADocumentMoves(t *testing.T) {
	raw := &hooked{MemStore: project.NewMemStore()}
	a := &project.Pages{Raw: raw.MemStore}
	x := project.NodeDocKey("w", "f", "n")
	putAll(t, a, []project.Write{summary("w", 1), {Key: x, Val: []byte(`"small"`)}})
	raw.after = func() { putAll(t, a, []project.Write{{Key: x, Val: largeDoc, Rev: 1}}) }
	vals, err := (&project.Pages{Raw: raw}).Values(context.Background(), "wf.w.>")
	if _, ok := vals[x]; !ok || err != nil {
		t.Errorf("Values while %s moves: %d values, %v; it is missing", x, len(vals), err)
	}
}

// A rebuild's Rewrite of a summary (one written before pages: the
// replay's says pages=1) keeps the page count its documents were placed
// by (DefaultPages).
func TestPagesRewriteKeepsTheSummarysPageCount(t *testing.T) {
	raw := project.NewMemStore()
	ctx := context.Background()
	putAll(t, raw, []project.Write{{Key: "wf.w", Val: []byte(`{"workflow_id":"w"}`)}})
	s := &project.Pages{Raw: raw}
	var ws []project.Write
	for i := range 32 {
		ws = append(ws, project.Write{Key: project.FormulaDocKey("w", fmt.Sprintf("f%d", i)), Val: []byte(`"d"`)})
	}
	putAll(t, s, ws)
	if err := s.Rewrite(ctx, "wf.w", []byte(`{"workflow_id":"w","pages":1}`)); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, w := range ws {
		if v, _, _ := (&project.Pages{Raw: raw}).Get(ctx, w.Key); v == nil {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("after the summary's Rewrite, %d of %d documents read as absent (another replica, or a restart)", lost, len(ws))
	}
}

// A rebuild's Rewrites keep a page under the bucket's largest value.
func TestPagesRewriteKeepsThePageStorable(t *testing.T) {
	raw := project.NewMemStore()
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	ws := []project.Write{summary("w", 1)}
	val := []byte(`"` + strings.Repeat("x", project.MaxPagedDoc-100) + `"`)
	for i := range 300 {
		ws = append(ws, project.Write{Key: project.NodeDocKey("w", "f", fmt.Sprintf("n%d", i)), Val: val})
	}
	putAll(t, s, ws)
	for _, w := range ws[1:] {
		if err := s.Rewrite(ctx, w.Key, append([]byte(`"y`), val[2:]...)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(raw.Vals["wf-page.w.0"]); n > 1<<20 {
		t.Errorf("the page holds %d bytes, over the bucket's 1 MiB", n)
	}
}

// The stale replica and the second create, on JetStream.
func TestPagesReplicasOnJetStream(t *testing.T) {
	ctx := context.Background()
	kv := kvStore(t, ctx)
	a, b := &project.Pages{Raw: kv}, &project.Pages{Raw: kv}
	x := project.NodeDocKey("w", "f", "n")
	putAll(t, a, []project.Write{summary("w", 1), {Key: x, Val: []byte(`"small"`)}})
	if _, rev, _ := b.Get(ctx, x); rev != 1 {
		t.Fatal(rev)
	}
	putAll(t, a, []project.Write{{Key: x, Val: append([]byte(`"ahead`), largeDoc[1:]...), Rev: 1}})
	ws := []project.Write{{Key: x, Val: append([]byte(`"behind`), largeDoc[1:]...), Rev: 1}}
	b.PutAll(ctx, ws)
	if v, _, _ := (&project.Pages{Raw: kv}).Get(ctx, x); !strings.HasPrefix(string(v), `"ahead`) {
		t.Errorf("stale move: a's document replaced by b's refused write (%v): %s...", ws[0].Err, v[:8])
	}
	y := project.NodeDocKey("w", "f", "y")
	if v, _, _ := b.Get(ctx, y); v != nil {
		t.Fatal(v)
	}
	putAll(t, a, []project.Write{{Key: y, Val: largeDoc}})
	ws = []project.Write{{Key: y, Val: []byte(`"small"`)}}
	b.PutAll(ctx, ws)
	if ws[0].Err == nil {
		t.Errorf("a second create of %s succeeded", y)
	}
}

// A page that does not decode stays bad to Get after a flush tried it.
func TestPagesABadPageStaysBadAfterAFlush(t *testing.T) {
	raw := project.NewMemStore()
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	a, b := project.NodeDocKey("w", "f", "a"), project.NodeDocKey("w", "f", "b")
	putAll(t, s, []project.Write{summary("w", 1), {Key: a, Val: []byte(`"a"`)}})
	_ = raw.Rewrite(ctx, "wf-page.w.0", []byte("not json"))
	s.Forget()
	ws := []project.Write{{Key: a, Val: []byte(`"a2"`), Rev: 1}, {Key: b, Val: []byte(`"b"`)}}
	s.PutAll(ctx, ws)
	t.Logf("a over 1: %v (sent to its own key); b: %d %v", ws[0].Err, ws[1].NewRev, ws[1].Err)
	if v, rev, err := s.Get(ctx, a); err == nil {
		t.Errorf("%s of the bad page: %s at %d, no error", a, v, rev)
	}
}
