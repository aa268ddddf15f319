package project

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gantry-dev/gantry/pkg/eventbus"
)

// Pages is the Store the state-store keeps gantry_state in. A workflow's
// formula and node documents (wf.<id>.<formula>[.<node>]) are kept many
// to a KV value, a page (wf-page.<id>.<n>, by a hash of the key), so
// that a flush writes one value per
// page it changed rather than one per document: a chain of a thousand
// links, each changing a formula and a node document, writes its 16
// pages about once a second (Projector.Hold) instead of two values per
// link. Every other key (a workflow's summary, the per-host documents,
// the checkpoint) is a value of its own, as is a formula or node document
// grown past MaxPagedDoc (it would make its page too large to store): it
// leaves its page for its own key, which it keeps.
//
// Callers see documents by their own keys and revisions: a paged
// document's revision counts its writes (1 when created); a document of
// its own key has its KV revision. A write compares the revision it was
// read at, as KVStore's do, and a page is written with a compare-and-set
// on its own revision, so two state-store replicas writing the same page
// lose nothing: the one behind fails, reads again and applies its events
// again (they are skipped as applied).
//
// Pages caches the pages it reads and writes; Forget drops them.
type Pages struct {
	Raw   PageStore
	mu    sync.Mutex
	known map[string]int // page counts by workflow id, from the summaries
	cache map[string]*page
}

// PageStore is where Pages keeps its values: KVStore, or MemStore.
type PageStore interface {
	Store
	Keys(ctx context.Context, filter string) ([]string, error)
	Values(ctx context.Context, filter string) (map[string][]byte, error)
	Rewrite(ctx context.Context, key string, val []byte) error
}

const (
	// DocsPerPage is how many documents a page holds, about: PagesFor.
	DocsPerPage = 128
	// MaxPages bounds a workflow's pages.
	MaxPages = 4096
	// DefaultPages is the page count of a workflow whose summary does
	// not say (written before pages, or not created by its accepted
	// event).
	DefaultPages = 16
	// MaxPagedDoc is the largest document a page holds (encoded); a
	// larger one is kept at its own key. With DocsPerPage, a page stays
	// well under the bucket's largest value (eventbus.MaxMessageBytes).
	MaxPagedDoc = 4 << 10
	// maxCachedPages bounds the cache.
	maxCachedPages = 1024
)

// PagesFor is the page count of a workflow of formulas formulas and nodes
// nodes: a power of two with about DocsPerPage documents a page.
func PagesFor(formulas, nodes int) int {
	n := 1
	for n*DocsPerPage < formulas+nodes && n < MaxPages {
		n *= 2
	}
	return n
}

// page is one page as read or written: its revision (0: absent) and its
// documents by the rest of their keys after "wf.<id>.".
type page struct {
	rev  uint64
	docs map[string]pageEntry
}

// pageEntry is a paged document: its revision and its value.
type pageEntry struct {
	R uint64          `json:"r"`
	V json.RawMessage `json:"v"`
}

// pagePrefix starts every page key; a workflow's pages are
// pagePrefix<id>.<n>.
const pagePrefix = "wf-page."

func pageKey(id string, n int) string { return pagePrefix + id + "." + strconv.Itoa(n) }

// pagedKey splits a formula or node document's key into its workflow id
// and the rest (formula[.node]); ok is false for any other key.
func pagedKey(key string) (id, rest string, ok bool) {
	r, ok := strings.CutPrefix(key, "wf.")
	if !ok {
		return "", "", false
	}
	id, rest, ok = strings.Cut(r, ".")
	return id, rest, ok && id != "" && rest != ""
}

// pageOf is the page of a document (by the rest of its key) among pages:
// by a hash of the whole rest, so that a formula of many nodes spreads
// over the pages as a workflow of many formulas does.
func pageOf(rest string, pages int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(rest))
	return int(h.Sum32() % uint32(pages))
}

// errRevision is a write over a revision the document no longer has.
var errRevision = errors.New("the document has another revision")

// Forget drops every cached page: they are read again.
func (s *Pages) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache = nil
}

// pagesOf is a workflow's page count, as its summary says (DefaultPages
// when it has none; not remembered while the summary is absent, as it
// may still come).
func (s *Pages) pagesOf(ctx context.Context, id string) (int, error) {
	if n, ok := s.known[id]; ok {
		return n, nil
	}
	b, _, err := s.Raw.Get(ctx, WorkflowDocKey(id))
	if err != nil || b == nil {
		return DefaultPages, err
	}
	s.learn(id, b)
	return s.known[id], nil
}

// learn remembers the page count a workflow's summary says.
func (s *Pages) learn(id string, summary []byte) {
	if _, ok := s.known[id]; ok {
		return
	}
	var d struct {
		Pages int `json:"pages"`
	}
	if json.Unmarshal(summary, &d) != nil || d.Pages <= 0 || d.Pages > MaxPages {
		d.Pages = DefaultPages
	}
	if s.known == nil {
		s.known = map[string]int{}
	}
	s.known[id] = d.Pages
}

// load returns a page, from the cache or the store. A page that does
// not decode comes back empty, at its revision, with errBadDocument (a
// rebuild writes it again).
func (s *Pages) load(ctx context.Context, key string) (*page, error) {
	if pg, ok := s.cache[key]; ok {
		return pg, nil
	}
	b, rev, err := s.Raw.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	pg := &page{rev: rev, docs: map[string]pageEntry{}}
	if b != nil {
		if err := json.Unmarshal(b, &pg.docs); err != nil {
			return &page{rev: rev, docs: map[string]pageEntry{}}, fmt.Errorf("%s: %w: %w", key, errBadDocument, err)
		}
	}
	s.keep(key, pg)
	return pg, nil
}

// keep caches a page.
func (s *Pages) keep(key string, pg *page) {
	if len(s.cache) >= maxCachedPages {
		s.cache = nil
	}
	if s.cache == nil {
		s.cache = map[string]*page{}
	}
	s.cache[key] = pg
}

// locate is the page key of a formula or node document.
func (s *Pages) locate(ctx context.Context, id, rest string) (string, error) {
	n, err := s.pagesOf(ctx, id)
	if err != nil {
		return "", err
	}
	return pageKey(id, pageOf(rest, n)), nil
}

func (s *Pages) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	id, rest, ok := pagedKey(key)
	if !ok {
		return s.Raw.Get(ctx, key)
	}
	s.mu.Lock()
	pk, err := s.locate(ctx, id, rest)
	var pg *page
	if err == nil {
		pg, err = s.load(ctx, pk)
	}
	var e pageEntry
	var inline bool
	if err == nil {
		e, inline = pg.docs[rest]
	}
	s.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	if inline {
		return e.V, e.R, nil
	}
	return s.Raw.Get(ctx, key) // kept at its own key, or absent
}

// pending is a page a flush changes: the index of the first write it
// carries (where it goes among the flush's values) and those writes.
type pending struct {
	key    string
	pg     *page
	first  int
	writes []int
	failed bool // a document moved out of it was not written
}

// flush is what one PutAll writes: ws, as values of their own keys (raw;
// rawOf, the index in ws of each) and pages; moved are documents moved
// out of a page to their own keys, written before anything else (a page
// without a document whose own key was not written would lose it).
type flush struct {
	ws    []Write
	raw   []Write
	rawOf []int
	pages map[string]*pending
	moved []move
}

// move is a document moved out of its page: ws[i] written as w.
type move struct {
	i    int
	w    Write
	page *pending
}

// own writes ws[i] as w, a value of its own key.
func (f *flush) own(i int, w Write) {
	f.raw, f.rawOf = append(f.raw, w), append(f.rawOf, i)
}

// paged records that ws[i] changes page pk.
func (f *flush) paged(i int, pk string, pg *page) *pending {
	p := f.pages[pk]
	if p == nil {
		p = &pending{key: pk, pg: pg, first: i}
		f.pages[pk] = p
	}
	p.writes = append(p.writes, i)
	return p
}

// PutAll writes each document over the revision it was read at: the
// documents of one page in one value, placed where the first of them was
// among ws (so that whoever reads a document in the state a write left it
// finds every earlier write too), the rest each in its own.
func (s *Pages) PutAll(ctx context.Context, ws []Write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range ws {
		if id, ok := strings.CutPrefix(w.Key, "wf."); ok && !strings.Contains(id, ".") {
			s.learn(id, w.Val) // a summary first written in this flush: its pages
		}
	}
	f := &flush{ws: ws, pages: map[string]*pending{}}
	for i := range ws {
		s.place(ctx, f, i)
	}
	for _, p := range f.pages {
		s.fit(ctx, f, p)
	}
	s.write(ctx, f)
}

// place decides where ws[i] goes: into its page, or to its own key.
func (s *Pages) place(ctx context.Context, f *flush, i int) {
	w := &f.ws[i]
	id, rest, ok := pagedKey(w.Key)
	if !ok {
		f.own(i, *w)
		return
	}
	pk, err := s.locate(ctx, id, rest)
	var pg *page
	if err == nil {
		pg, err = s.load(ctx, pk)
		if errors.Is(err, errBadDocument) {
			// Its documents cannot be read either way: written anew (a
			// rebuild restores the others).
			s.keep(pk, pg)
			err = nil
		}
	}
	if err != nil {
		w.Err = err
		return
	}
	e, inline := pg.docs[rest]
	switch {
	case inline && e.R != w.Rev:
		w.Err = fmt.Errorf("%s: %w: %d, not %d", w.Key, errRevision, e.R, w.Rev)
	case !inline && w.Rev > 0:
		f.own(i, *w) // kept at its own key
	case len(w.Val) > MaxPagedDoc && !inline:
		f.own(i, *w) // created at its own key
	case len(w.Val) > MaxPagedDoc:
		// Grown too large for a page: out of it, to its own key.
		if s.moveOut(ctx, f, i, w.Val, f.paged(i, pk, pg)) {
			delete(pg.docs, rest)
		}
	default:
		pg.docs[rest] = pageEntry{R: e.R + 1, V: w.Val}
		w.NewRev = e.R + 1
		f.paged(i, pk, pg)
	}
}

// moveOut writes ws[i] as val at its own key, over whatever an earlier
// try left there, before its page p.
func (s *Pages) moveOut(ctx context.Context, f *flush, i int, val []byte, p *pending) bool {
	w := &f.ws[i]
	_, rev, err := s.Raw.Get(ctx, w.Key)
	if err != nil {
		w.Err = err
		return false
	}
	f.moved = append(f.moved, move{i: i, w: Write{Key: w.Key, Val: val, Rev: rev}, page: p})
	w.NewRev = 0
	return true
}

// maxPageBytes is the largest page written: beyond it, the documents the
// flush wrote to the page move to their own keys (a page holds about
// DocsPerPage documents of at most MaxPagedDoc, far less; this keeps a
// workflow paged by DefaultPages, or larger than MaxPages pages hold,
// storable).
const maxPageBytes = 512 << 10

// fit moves the flush's documents out of a page too large to store.
func (s *Pages) fit(ctx context.Context, f *flush, p *pending) {
	size := len(encodePage(p.pg.docs))
	for _, i := range p.writes {
		if size <= maxPageBytes {
			return
		}
		_, rest, _ := pagedKey(f.ws[i].Key)
		e, inline := p.pg.docs[rest]
		if !inline || f.ws[i].Err != nil || !s.moveOut(ctx, f, i, e.V, p) {
			continue
		}
		delete(p.pg.docs, rest)
		size -= len(rest) + len(e.V) + 16
	}
}

// write stores the flush's values in order and gives each of ws its
// answer.
func (s *Pages) write(ctx context.Context, f *flush) {
	s.writeMoved(ctx, f)
	type value struct {
		pos int
		raw int      // index in f.raw, or -1
		pg  *pending // or a page
	}
	var order []value
	for i := range f.raw {
		order = append(order, value{pos: f.rawOf[i], raw: i})
	}
	for _, p := range f.pages {
		if !p.failed {
			order = append(order, value{pos: p.first, raw: -1, pg: p})
		}
	}
	slices.SortStableFunc(order, func(a, b value) int { return a.pos - b.pos })
	phys := make([]Write, len(order))
	for i, v := range order {
		if v.raw >= 0 {
			phys[i] = f.raw[v.raw]
			phys[i].Err, phys[i].NewRev = nil, 0
			continue
		}
		phys[i] = Write{Key: v.pg.key, Val: encodePage(v.pg.pg.docs), Rev: v.pg.pg.rev}
	}
	if len(phys) > 0 {
		s.Raw.PutAll(ctx, phys)
	}
	ws := f.ws
	for i, v := range order {
		w := phys[i]
		if v.raw >= 0 {
			j := f.rawOf[v.raw]
			if w.Err != nil {
				ws[j].Err = w.Err
			}
			ws[j].NewRev = w.NewRev
			continue
		}
		if w.Err != nil {
			delete(s.cache, v.pg.key) // read again
			for _, j := range v.pg.writes {
				ws[j].Err = fmt.Errorf("write %s: %w", v.pg.key, w.Err)
			}
			continue
		}
		v.pg.pg.rev = w.NewRev
	}
	for i := range ws {
		if ws[i].Err != nil {
			ws[i].NewRev = 0
		}
	}
}

// writeMoved writes the documents moved out of their pages; the page of
// one that failed is not written (its documents get the error, and it is
// read again).
func (s *Pages) writeMoved(ctx context.Context, f *flush) {
	if len(f.moved) == 0 {
		return
	}
	ws := make([]Write, len(f.moved))
	for i, m := range f.moved {
		ws[i] = m.w
	}
	s.Raw.PutAll(ctx, ws)
	for i, m := range f.moved {
		if ws[i].Err == nil {
			f.ws[m.i].NewRev = ws[i].NewRev
			continue
		}
		if !m.page.failed {
			m.page.failed = true
			delete(s.cache, m.page.key)
			for _, j := range m.page.writes {
				f.ws[j].Err = fmt.Errorf("write %s: %w", m.w.Key, ws[i].Err)
			}
		}
	}
}

// encodePage is a page's value: its documents by key, in key order.
func encodePage(docs map[string]pageEntry) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(docs)) {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(`:{"r":`)
		b.WriteString(strconv.FormatUint(docs[k].R, 10))
		b.WriteString(`,"v":`)
		b.Write(docs[k].V)
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return b.Bytes()
}

func (s *Pages) Mark(ctx context.Context, key string, val []byte) error {
	return s.Raw.Mark(ctx, key, val)
}

// RemoveWorkflow removes a workflow's documents and pages.
func (s *Pages) RemoveWorkflow(ctx context.Context, id string) error {
	s.mu.Lock()
	for k := range s.cache {
		if workflowOf(k) == id {
			delete(s.cache, k) // a page of it
		}
	}
	delete(s.known, id)
	s.mu.Unlock()
	return s.Raw.RemoveWorkflow(ctx, id)
}

// pageFilter is the filter of the pages that may hold documents filter
// matches ("" when none can).
func pageFilter(filter string) string {
	t := strings.Split(filter, ".")
	if t[0] == ">" {
		return pagePrefix + ">"
	}
	if (t[0] != "wf" && t[0] != "*") || len(t) < 2 {
		return ""
	}
	if t[1] == ">" {
		return pagePrefix + ">"
	}
	if len(t) < 3 {
		return ""
	}
	return pagePrefix + t[1] + ".*"
}

// Values reads every document whose key matches filter: the values of
// their own keys and the documents of the pages that may hold some.
func (s *Pages) Values(ctx context.Context, filter string) (map[string][]byte, error) {
	out, err := s.Raw.Values(ctx, filter)
	if err != nil {
		return nil, err
	}
	for k := range out {
		if strings.HasPrefix(k, pagePrefix) {
			delete(out, k)
		}
	}
	pf := pageFilter(filter)
	if pf == "" {
		return out, nil
	}
	pages, err := s.Raw.Values(ctx, pf)
	if err != nil {
		return nil, err
	}
	for pk, b := range pages {
		rest, _ := strings.CutPrefix(pk, pagePrefix)
		id, _, _ := strings.Cut(rest, ".")
		var docs map[string]pageEntry
		if json.Unmarshal(b, &docs) != nil {
			continue // not one of ours
		}
		for r, e := range docs {
			if k := "wf." + id + "." + r; eventbus.KeyMatches(filter, k) {
				out[k] = e.V // a page's copy over one an unfinished move left
			}
		}
	}
	return out, nil
}

// Keys lists the keys of the documents matching filter.
func (s *Pages) Keys(ctx context.Context, filter string) ([]string, error) {
	if pageFilter(filter) == "" {
		keys, err := s.Raw.Keys(ctx, filter)
		return slices.DeleteFunc(keys, func(k string) bool { return strings.HasPrefix(k, pagePrefix) }), err
	}
	vals, err := s.Values(ctx, filter)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(vals)), nil
}

// Rewrite replaces a document whatever its revision (nil removes it): a
// rebuild's.
func (s *Pages) Rewrite(ctx context.Context, key string, val []byte) error {
	id, rest, ok := pagedKey(key)
	if !ok {
		return s.Raw.Rewrite(ctx, key, val)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pk, err := s.locate(ctx, id, rest)
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		delete(s.cache, pk)
		pg, err := s.load(ctx, pk)
		if err != nil && !errors.Is(err, errBadDocument) {
			return err // (one that does not decode is written anew)
		}
		e := pg.docs[rest]
		if val == nil || len(val) > MaxPagedDoc {
			delete(pg.docs, rest)
		} else {
			pg.docs[rest] = pageEntry{R: e.R + 1, V: val}
		}
		ws := []Write{{Key: pk, Val: encodePage(pg.docs), Rev: pg.rev}}
		s.Raw.PutAll(ctx, ws)
		if ws[0].Err == nil {
			pg.rev = ws[0].NewRev
			break
		}
		delete(s.cache, pk)
		if try == 4 {
			return fmt.Errorf("rewrite %s in %s: %w", key, pk, ws[0].Err)
		}
	}
	if val != nil && len(val) <= MaxPagedDoc {
		val = nil // paged: nothing of its own key
	}
	if b, _, err := s.Raw.Get(ctx, key); err != nil || (b == nil && val == nil) {
		return err
	}
	return s.Raw.Rewrite(ctx, key, val)
}
