package project_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// racing is a store where, as a replica reads a value of its own, another
// replica has just written the document again (a new own value, the one
// read purged): n times.
type racing struct {
	*project.MemStore
	n     int
	other func()
}

func (s *racing) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	if strings.HasPrefix(key, "wf-doc.") && s.n > 0 {
		s.n--
		s.other()
	}
	return s.MemStore.Get(ctx, key)
}

// writtenAgain stores a large document x (a value of its own) in pages on
// mem, and returns raw, mem read through a racing store, and write, which
// writes x again as another replica would (a new value, the one before
// purged).
func writtenAgain(t *testing.T) (mem *project.MemStore, raw *racing, x string, write func()) {
	t.Helper()
	mem = project.NewMemStore()
	raw = &racing{MemStore: mem}
	b := &project.Pages{Raw: mem}
	ctx := context.Background()
	x = project.NodeDocKey("w", "f", "n")
	putAll(t, b, []project.Write{summary("w", 1), {Key: x, Val: largeDoc}})
	rev := uint64(1)
	write = func() {
		ws := []project.Write{{Key: x, Val: largeDoc, Rev: rev}}
		b.PutAll(ctx, ws)
		if ws[0].Err != nil {
			t.Fatal(ws[0].Err)
		}
		rev = ws[0].NewRev
	}
	return mem, raw, x, write
}

// A document another replica writes again (a new value of its own, the
// one read purged) between this replica's page read and value read, time
// after time, is read all the same: a value gone from a page that moved
// on is not a bad document.
func TestPagesGetWhileAnotherReplicaWritesAgain(t *testing.T) {
	mem, raw, x, write := writtenAgain(t)
	ctx := context.Background()
	raw.other, raw.n = write, 3
	a := &project.Pages{Raw: raw}
	v, r, err := a.Get(ctx, x)
	if err != nil {
		t.Errorf("a document that is fine reads as: %v", err)
	}
	t.Logf("%d bytes at %d", len(v), r)
	if v, _, err := (&project.Pages{Raw: mem}).Get(ctx, x); err != nil || len(v) != len(largeDoc) {
		t.Fatalf("the document itself: %d bytes, %v", len(v), err)
	}
}

// The same, from a stale cached page.
func TestPagesGetWithAStaleCacheWhileAnotherWrites(t *testing.T) {
	_, raw, x, write := writtenAgain(t)
	ctx := context.Background()
	a := &project.Pages{Raw: raw}
	if _, _, err := a.Get(ctx, x); err != nil { // cached
		t.Fatal(err)
	}
	write() // a's cache stale
	raw.other, raw.n = write, 2
	if _, _, err := a.Get(ctx, x); err != nil {
		t.Errorf("a document that is fine reads as: %v", err)
	}
}

// A page that names a value that is gone, read twice unchanged, is a bad
// document: skipped, not read again for ever.
func TestPagesAValueGoneFromAPageThatStays(t *testing.T) {
	mem := project.NewMemStore()
	s := &project.Pages{Raw: mem}
	ctx := context.Background()
	x := project.NodeDocKey("w", "f", "n")
	putAll(t, s, []project.Write{summary("w", 1), {Key: x, Val: largeDoc}})
	own := ownValues(mem, "w")
	if len(own) != 1 {
		t.Fatalf("values of their own %v", own)
	}
	if err := mem.Remove(ctx, own[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, x); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Errorf("a page naming a value that is gone: %v, want a bad document", err)
	}
}
