package project

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
// that a flush writes one value per page it changed rather than one per
// document: a chain of a thousand links, each changing a formula and a
// node document, writes its 16 pages about once a second
// (Projector.Hold) instead of two values per link. A workflow of more
// than MaxPagedDocuments documents keeps each a value of its own
// (Unpaged): a flush of its run would rewrite about all of its pages.
// Every other key (a workflow's summary, the per-host documents, the
// checkpoint) is a value of its own.
//
// The page holds, for each of its documents, the document's revision (a
// count of its writes) and either the document itself or, for one larger
// than MaxPagedDoc, the name of the value that holds it
// (wf-doc.<id>.<nonce>, a new name at each write, written before the page
// that names it; the value it replaces is removed once the page is
// written). So the page alone says which revision and which value
// each of its documents is at, and a write to the page is a
// compare-and-set on its KV revision: two state-store replicas writing
// the same page lose nothing, the one behind fails, reads again and
// applies its events again (they are skipped as applied), and whatever it
// wrote under a name of its own is never read (left for the workflow's
// prune: a write answered failed may be stored, its answer lost).
//
// What a build before pages stored, a document a value at its own key,
// is read there while its page has no entry for it; its next write goes
// to the page.
//
// Pages caches the pages it reads and writes; Forget drops them.
type Pages struct {
	Raw   PageStore
	mu    sync.Mutex
	known map[string]int // page counts by workflow id, from the summaries
	// before: the workflows whose summary has no page count: a build
	// before pages may have left documents at their own keys.
	before map[string]bool
	cache  map[string]*page
}

// PageStore is where Pages keeps its values: KVStore, or MemStore.
type PageStore interface {
	Store
	Keys(ctx context.Context, filter string) ([]string, error)
	Values(ctx context.Context, filter string) (map[string][]byte, error)
	Rewrite(ctx context.Context, key string, val []byte) error
	// Remove removes a key and leaves nothing of it (no delete marker).
	Remove(ctx context.Context, key string) error
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
	// larger one is a value of its own, which the page names.
	MaxPagedDoc = 4 << 10
	// maxPageBytes is the largest page written: beyond it, its largest
	// documents become values of their own until it fits (a page holds
	// about DocsPerPage documents of at most MaxPagedDoc, far less; this
	// keeps a workflow paged by DefaultPages, or larger than MaxPages
	// pages hold, storable under the bucket's largest value,
	// eventbus.MaxMessageBytes).
	maxPageBytes = 512 << 10
	// maxCachedPages bounds the cache.
	maxCachedPages = 1024
)

// MaxPagedDocuments is the most formula and node documents a workflow
// keeps in pages; a larger one keeps each a value of its own (Unpaged).
// A flush rewrites each page it changes whole, and a flush of a large
// workflow's run changes about every page: the run of a fleet of 10,000
// formulas of 5 nodes wrote 29.7 times the bytes of its documents in
// pages (1,357 MiB against 47 MiB, and 25 times the state-store's CPU;
// BenchmarkPagesWritesAFleet) to store 1.08 values a node instead of
// 2.4. Up to 4,096 documents (32 pages), a flush rewrites at most about
// 1.6 MiB of 400-byte documents (up to 16 MiB of documents near
// MaxPagedDoc).
const MaxPagedDocuments = 4096

// Unpaged is the page count of a workflow whose formula and node
// documents are each a value of its own, as its summary says
// ("pages": -1).
const Unpaged = -1

// PagesFor is the page count of a workflow of formulas formulas and nodes
// nodes: a power of two with about DocsPerPage documents a page, or
// Unpaged beyond MaxPagedDocuments.
func PagesFor(formulas, nodes int) int {
	if formulas+nodes > MaxPagedDocuments {
		return Unpaged
	}
	n := 1
	for n*DocsPerPage < formulas+nodes && n < MaxPages {
		n *= 2
	}
	return n
}

// page is one page as read or written: its KV revision (0: absent) and
// its documents by the rest of their keys after "wf.<id>.".
type page struct {
	rev  uint64
	docs map[string]pageEntry
}

// pageEntry is a paged document: its revision, and its value (V) or the
// nonce of the value of its own that holds it (K).
type pageEntry struct {
	R uint64          `json:"r"`
	V json.RawMessage `json:"v,omitempty"`
	K string          `json:"k,omitempty"`
}

// The key prefixes of Pages' values: a workflow's pages are
// pagePrefix<id>.<n>, its documents too large for a page
// ownPrefix<id>.<nonce>.
const (
	pagePrefix = "wf-page."
	ownPrefix  = "wf-doc."
)

func pageKey(id string, n int) string { return pagePrefix + id + "." + strconv.Itoa(n) }

func ownKey(id, nonce string) string { return ownPrefix + id + "." + nonce }

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

// nonce names a value of its own: never the same twice.
func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Forget drops every cached page: they are read again.
func (s *Pages) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache = nil
}

// pagesOf is a workflow's page count, as its summary says (DefaultPages
// when it has none; not remembered while the summary is absent, as it
// may still come), or Unpaged.
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

// summaryPages is the page count a summary says, or Unpaged (0: none).
func summaryPages(summary []byte) int {
	var d struct {
		Pages int `json:"pages"`
	}
	if json.Unmarshal(summary, &d) != nil || (d.Pages <= 0 && d.Pages != Unpaged) || d.Pages > MaxPages {
		return 0
	}
	return d.Pages
}

// learn remembers the page count a workflow's summary says. It never
// changes once known: the documents are where it put them.
func (s *Pages) learn(id string, summary []byte) {
	if _, ok := s.known[id]; ok {
		return
	}
	n := summaryPages(summary)
	if s.known == nil {
		s.known, s.before = map[string]int{}, map[string]bool{}
	}
	if n == 0 {
		n, s.before[id] = DefaultPages, true
	}
	s.known[id] = n
}

// maybeBefore says whether a workflow may have documents a build before
// pages stored at their own keys: its summary has no page count, or is
// not read yet.
func (s *Pages) maybeBefore(id string) bool {
	_, known := s.known[id]
	return !known || s.before[id]
}

// load returns a page, from the cache or the store; a page that does not
// decode is errBadDocument (its documents are skipped until a rebuild
// writes them again).
func (s *Pages) load(ctx context.Context, key string) (*page, error) {
	if pg, ok := s.cache[key]; ok {
		return pg, nil
	}
	pg, err := s.read(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(s.cache) >= maxCachedPages {
		s.cache = nil
	}
	if s.cache == nil {
		s.cache = map[string]*page{}
	}
	s.cache[key] = pg
	return pg, nil
}

// read reads a page from the store.
func (s *Pages) read(ctx context.Context, key string) (*page, error) {
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
	return pg, nil
}

// locate is the page key of a formula or node document ("" when its
// workflow is Unpaged).
func (s *Pages) locate(ctx context.Context, id, rest string) (string, error) {
	n, err := s.pagesOf(ctx, id)
	if err != nil || n == Unpaged {
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
	defer s.mu.Unlock()
	pk, err := s.locate(ctx, id, rest)
	if err != nil || pk == "" {
		if err == nil { // unpaged
			return s.Raw.Get(ctx, key)
		}
		return nil, 0, err
	}
	var named uint64 // the revision of the page read last that named a value gone
	for try := 0; ; try++ {
		pg, err := s.load(ctx, pk)
		if err != nil {
			return nil, 0, err
		}
		e, ok := pg.docs[rest]
		switch {
		case !ok && !s.maybeBefore(id):
			return nil, 0, nil
		case !ok:
			// Not in its page: absent, or as a build before pages
			// stored it (written to the page next, as a create).
			b, _, err := s.Raw.Get(ctx, key)
			return b, 0, err
		case e.K == "":
			return e.V, e.R, nil
		}
		b, _, err := s.Raw.Get(ctx, ownKey(id, e.K))
		if err != nil || b != nil {
			return b, e.R, err
		}
		// The value the page names is gone: a later write named another
		// (it is read again), unless the page read from the store names
		// it still, unchanged (a bad document, skipped until a rebuild
		// writes it).
		delete(s.cache, pk)
		switch {
		case named == pg.rev:
			return nil, 0, fmt.Errorf("%s: %w: its page %s names %s, which is gone", key, errBadDocument, pk, ownKey(id, e.K))
		case try == 9:
			return nil, 0, fmt.Errorf("%s: its page %s changed under each of 10 reads", key, pk)
		}
		named = pg.rev
	}
}

// pending is a page a flush changes: where it goes among the flush's
// values (the index of the first write it carries), the writes it
// carries, the values of their own that it names (written before it) and
// those it no longer names (removed once it is written).
type pending struct {
	key    string
	id     string
	pg     *page
	first  int
	writes []int
	own    []Write
	gone   []string
	failed bool // a value it names was not written
}

// flush is what one PutAll writes: ws, as values of their own keys (raw;
// rawOf, the index in ws of each) and pages.
type flush struct {
	ws    []Write
	raw   []Write
	rawOf []int
	pages map[string]*pending
}

// PutAll writes each document over the revision it was read at: the
// documents of one page in one value, the rest each in its own. A page is
// stored where the first write it carries was among ws: whoever reads a
// document finds every write before it in ws that is not a document of a
// page, and every write of the pages, stored (the workflow's summary,
// written last when a workflow ends, after its formulas and nodes); a
// document read from a page may be ahead of a value of its own written
// between two of the page's (a per-host document).
func (s *Pages) PutAll(ctx context.Context, ws []Write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	learned := map[int]string{} // summaries first learned from this flush, by index in ws
	for i, w := range ws {
		if id, ok := strings.CutPrefix(w.Key, "wf."); ok && !strings.Contains(id, ".") {
			if _, known := s.known[id]; !known {
				learned[i] = id
			}
			s.learn(id, w.Val) // a summary first written in this flush: its pages
		}
	}
	f := &flush{ws: ws, pages: map[string]*pending{}}
	for i := range ws {
		s.place(ctx, f, i)
	}
	for _, p := range f.pages {
		if len(p.writes) > 0 {
			fit(p)
		}
	}
	s.write(ctx, f)
	for i, id := range learned {
		if ws[i].Err != nil {
			// Not stored (another replica's summary came first, maybe of
			// a build that counts pages otherwise): read it, not this.
			delete(s.known, id)
			delete(s.before, id)
		}
	}
}

// place puts ws[i] into its page, or with the values of their own keys.
func (s *Pages) place(ctx context.Context, f *flush, i int) {
	w := &f.ws[i]
	id, rest, ok := pagedKey(w.Key)
	if !ok {
		f.raw, f.rawOf = append(f.raw, *w), append(f.rawOf, i)
		return
	}
	p, err := s.pending(ctx, f, id, rest, i)
	if err != nil {
		w.Err = err
		return
	}
	if p == nil { // unpaged
		f.raw, f.rawOf = append(f.raw, *w), append(f.rawOf, i)
		return
	}
	e, inline := p.pg.docs[rest]
	if e.R != w.Rev {
		w.Err = fmt.Errorf("%s: %w: %d, not %d", w.Key, errRevision, e.R, w.Rev)
		return
	}
	if inline && e.K != "" {
		p.gone = append(p.gone, ownKey(id, e.K))
	}
	p.pg.docs[rest] = pageEntry{R: e.R + 1, V: w.Val}
	w.NewRev = e.R + 1
	p.writes = append(p.writes, i)
}

// pending is the flush's copy of the page of a document, read (or taken
// from the cache) the first time the flush writes to it; nil for a
// document of an Unpaged workflow.
func (s *Pages) pending(ctx context.Context, f *flush, id, rest string, i int) (*pending, error) {
	pk, err := s.locate(ctx, id, rest)
	if err != nil || pk == "" {
		return nil, err
	}
	if p := f.pages[pk]; p != nil {
		return p, nil
	}
	pg, err := s.load(ctx, pk)
	if err != nil {
		return nil, err
	}
	p := &pending{key: pk, id: id, pg: pg, first: i}
	f.pages[pk] = p
	return p, nil
}

// fit makes each document of a page larger than MaxPagedDoc a value of
// its own, then, while the page is larger than maxPageBytes, its largest
// documents too. (A page of entries that all name values of their own
// holds about 17,000 of them under 1 MiB: far more than DocsPerPage.)
func fit(p *pending) {
	size := 0
	for rest, e := range p.pg.docs {
		if len(e.V) > MaxPagedDoc {
			p.moveOut(rest, e)
		}
		size += entrySize(rest, p.pg.docs[rest])
	}
	if size <= maxPageBytes {
		return
	}
	rests := slices.Collect(maps.Keys(p.pg.docs))
	slices.SortFunc(rests, func(a, b string) int { return len(p.pg.docs[b].V) - len(p.pg.docs[a].V) })
	for _, rest := range rests {
		if size <= maxPageBytes {
			return
		}
		if e := p.pg.docs[rest]; e.K == "" {
			size -= entrySize(rest, e)
			p.moveOut(rest, e)
			size += entrySize(rest, p.pg.docs[rest])
		}
	}
}

// entrySize is about what an entry takes in its page's value.
func entrySize(rest string, e pageEntry) int {
	return len(rest) + len(e.V) + len(e.K) + 32
}

// moveOut makes a document of the page a value of its own, under a new
// name, at the same revision.
func (p *pending) moveOut(rest string, e pageEntry) {
	k := nonce()
	p.own = append(p.own, Write{Key: ownKey(p.id, k), Val: e.V})
	p.pg.docs[rest] = pageEntry{R: e.R, K: k}
}

// write stores the flush's values and gives each of ws its answer: the
// values the pages name first, then, in order, the pages and the values
// of their own keys; then it removes what the pages no longer name.
func (s *Pages) write(ctx context.Context, f *flush) {
	s.writeOwn(ctx, f)
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
		if !p.failed && len(p.writes) > 0 {
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
	var gone []string
	for i, v := range order {
		w := phys[i]
		if v.raw >= 0 {
			f.ws[f.rawOf[v.raw]].Err, f.ws[f.rawOf[v.raw]].NewRev = w.Err, w.NewRev
			continue
		}
		if w.Err != nil {
			// What it names is left: a write answered failed may be
			// stored all the same (its answer lost). A value named by
			// no page is read by no one, and goes with the workflow's
			// prune.
			v.pg.fail(s, f, fmt.Errorf("write %s: %w", v.pg.key, w.Err))
			continue
		}
		v.pg.pg.rev = w.NewRev
		gone = append(gone, v.pg.gone...)
	}
	for _, k := range gone {
		_ = s.Raw.Remove(ctx, k) // replaced by the page written: a failure leaves it to the prune
	}
}

// writeOwn writes the values of their own that the pages name; a page
// one of whose values failed is not written.
func (s *Pages) writeOwn(ctx context.Context, f *flush) {
	var ws []Write
	var of []*pending
	for _, p := range f.pages {
		for _, o := range p.own {
			ws, of = append(ws, o), append(of, p)
		}
	}
	if len(ws) == 0 {
		return
	}
	s.Raw.PutAll(ctx, ws)
	for i, w := range ws {
		if w.Err != nil && !of[i].failed {
			of[i].fail(s, f, fmt.Errorf("write %s: %w", w.Key, w.Err))
		}
	}
}

// fail gives each write the page carries err and drops the page from the
// cache (it is read again).
func (p *pending) fail(s *Pages, f *flush, err error) {
	p.failed = true
	delete(s.cache, p.key)
	for _, j := range p.writes {
		f.ws[j].Err, f.ws[j].NewRev = err, 0
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
		if e := docs[k]; e.K != "" {
			b.WriteString(`,"k":"` + e.K + `"}`)
			continue
		}
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

// RemoveWorkflow removes a workflow's documents, pages and values of
// their own.
func (s *Pages) RemoveWorkflow(ctx context.Context, id string) error {
	s.mu.Lock()
	for k := range s.cache {
		if workflowOf(k) == id {
			delete(s.cache, k) // a page of it
		}
	}
	delete(s.known, id)
	delete(s.before, id)
	s.mu.Unlock()
	return s.Raw.RemoveWorkflow(ctx, id)
}

// pageFilter is the filter of the pages that may hold documents filter
// matches, and the workflow token of it ("" when none can).
func pageFilter(filter string) (string, string) {
	t := strings.Split(filter, ".")
	if t[0] == ">" {
		return pagePrefix + ">", "*"
	}
	if (t[0] != "wf" && t[0] != "*") || len(t) < 2 {
		return "", ""
	}
	if t[1] == ">" {
		return pagePrefix + ">", "*"
	}
	if len(t) < 3 {
		return "", ""
	}
	return pagePrefix + t[1] + ".*", t[1]
}

// Values reads every document whose key matches filter: the pages that
// may hold some, the values of their own they name, and the values of
// their own keys (a page's entry, written later, over a copy a build
// before pages left).
func (s *Pages) Values(ctx context.Context, filter string) (map[string][]byte, error) {
	pf, wid := pageFilter(filter)
	var pages map[string][]byte
	if pf != "" {
		var err error
		if pages, err = s.Raw.Values(ctx, pf); err != nil {
			return nil, err
		}
	}
	out, err := s.Raw.Values(ctx, filter)
	if err != nil {
		return nil, err
	}
	for k := range out {
		if strings.HasPrefix(k, pagePrefix) || strings.HasPrefix(k, ownPrefix) {
			delete(out, k)
		}
	}
	if pf == "" {
		return out, nil
	}
	own, err := s.Raw.Values(ctx, ownPrefix+wid+".*")
	if err != nil {
		return nil, err
	}
	for pk, b := range pages {
		if err := s.expand(ctx, filter, pk, b, own, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// expand adds to out the documents of page pk (its value b) that filter
// matches; own are the values of their own read after the pages.
func (s *Pages) expand(ctx context.Context, filter, pk string, b []byte, own, out map[string][]byte) error {
	id, _, _ := strings.Cut(strings.TrimPrefix(pk, pagePrefix), ".")
	s.mu.Lock()
	n, err := s.pagesOf(ctx, id)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if n == Unpaged {
		// Its documents are values of their own; a page of it is what a
		// replica of a build before unpaged workflows wrote, left out
		// (a rebuild removes it: Rewrite).
		return nil
	}
	var docs map[string]pageEntry
	if json.Unmarshal(b, &docs) != nil {
		return nil // read as nothing, as Get reads its documents as bad
	}
	for rest, e := range docs {
		k := "wf." + id + "." + rest
		if !eventbus.KeyMatches(filter, k) {
			continue
		}
		if e.K == "" {
			out[k] = e.V
			continue
		}
		if v, ok := own[ownKey(id, e.K)]; ok {
			out[k] = v
			continue
		}
		// Named by the page read, and gone since: written again under
		// another name, which the page read now names. One that cannot
		// be read is left out, as a page that does not decode is.
		s.mu.Lock()
		delete(s.cache, pk)
		s.mu.Unlock()
		v, _, err := s.Get(ctx, k)
		switch {
		case errors.Is(err, errBadDocument):
		case err != nil:
			return err
		case v != nil:
			out[k] = v
		}
	}
	return nil
}

// Keys lists the keys of the documents matching filter.
func (s *Pages) Keys(ctx context.Context, filter string) ([]string, error) {
	if pf, _ := pageFilter(filter); pf == "" {
		keys, err := s.Raw.Keys(ctx, filter)
		return slices.DeleteFunc(keys, func(k string) bool {
			return strings.HasPrefix(k, pagePrefix) || strings.HasPrefix(k, ownPrefix)
		}), err
	}
	vals, err := s.Values(ctx, filter)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(vals)), nil
}

// Rewrite replaces a document whatever its revision (nil removes it): a
// rebuild's. A summary keeps the page count it has (or its lack of
// one): its documents are where that put them.
func (s *Pages) Rewrite(ctx context.Context, key string, val []byte) error {
	id, rest, ok := pagedKey(key)
	if !ok {
		if id, isSummary := strings.CutPrefix(key, "wf."); isSummary && val != nil && !strings.Contains(id, ".") {
			var err error
			if val, err = s.keepPages(ctx, key, val); err != nil {
				return err
			}
		}
		return s.Raw.Rewrite(ctx, key, val)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pk, err := s.locate(ctx, id, rest)
	if err != nil {
		return err
	}
	if pk == "" { // unpaged
		if err := s.Raw.Rewrite(ctx, key, val); err != nil {
			return err
		}
		return s.dropStray(ctx, id, rest)
	}
	for try := 0; ; try++ {
		err := s.rewrite(ctx, id, rest, pk, val)
		if err == nil || try == 4 {
			if err == nil && val == nil {
				_ = s.Raw.Rewrite(ctx, key, nil) // and what a build before pages left
			}
			return err
		}
	}
}

// dropStray removes an unpaged workflow's document from the page a build
// before unpaged workflows put it in (it read the summary's -1 as no
// count: DefaultPages), if there.
func (s *Pages) dropStray(ctx context.Context, id, rest string) error {
	pk := pageKey(id, pageOf(rest, DefaultPages))
	pg, err := s.read(ctx, pk)
	if err != nil && !errors.Is(err, errBadDocument) {
		return err
	}
	if _, ok := pg.docs[rest]; !ok && err == nil {
		return nil
	}
	return s.rewrite(ctx, id, rest, pk, nil)
}

// rewrite writes one document into its page, read afresh (one that does
// not decode is written anew: a rebuild writes its other documents too).
func (s *Pages) rewrite(ctx context.Context, id, rest, pk string, val []byte) error {
	return s.rewritePage(ctx, id, pk, map[string][]byte{rest: val})
}

// rewritePage writes documents (by the rest of their keys; nil removes
// one) into their page pk, read afresh, in one write.
func (s *Pages) rewritePage(ctx context.Context, id, pk string, docs map[string][]byte) error {
	delete(s.cache, pk)
	pg, err := s.read(ctx, pk)
	if err != nil && !errors.Is(err, errBadDocument) {
		return err
	}
	p := &pending{key: pk, id: id, pg: pg, writes: []int{0}}
	for rest, val := range docs {
		e := pg.docs[rest]
		if e.K != "" {
			p.gone = append(p.gone, ownKey(id, e.K))
		}
		if val == nil {
			delete(pg.docs, rest)
		} else {
			pg.docs[rest] = pageEntry{R: e.R + 1, V: val}
		}
	}
	fit(p)
	ws := []Write{{}}
	s.write(ctx, &flush{ws: ws, pages: map[string]*pending{pk: p}})
	return ws[0].Err
}

// RewriteAll rewrites the documents keys name to their values in vals
// (none: removed), as Rewrite does each, but each page once for all of
// its documents: a rebuild of a paged workflow writes its pages, not a
// page for each of its documents. The other keys (summaries first) are
// rewritten one by one, before the pages.
func (s *Pages) RewriteAll(ctx context.Context, keys []string, vals map[string][]byte) error {
	type pageDocs struct {
		id   string
		docs map[string][]byte
		keys []string
	}
	pages := map[string]*pageDocs{}
	var order, paged []string
	for _, k := range keys {
		if _, _, ok := pagedKey(k); ok {
			paged = append(paged, k)
		} else if err := s.Rewrite(ctx, k, vals[k]); err != nil {
			return fmt.Errorf("rewrite %s: %w", k, err)
		}
	}
	for _, k := range paged {
		id, rest, _ := pagedKey(k)
		s.mu.Lock()
		pk, err := s.locate(ctx, id, rest)
		s.mu.Unlock()
		if err != nil || pk == "" { // unpaged: a value of its own
			if err == nil {
				err = s.Rewrite(ctx, k, vals[k])
			}
			if err != nil {
				return fmt.Errorf("rewrite %s: %w", k, err)
			}
			continue
		}
		pd := pages[pk]
		if pd == nil {
			pd = &pageDocs{id: id, docs: map[string][]byte{}}
			pages[pk] = pd
			order = append(order, pk)
		}
		pd.docs[rest], pd.keys = vals[k], append(pd.keys, k)
	}
	for _, pk := range order {
		if err := s.rewriteAllOf(ctx, pk, pages[pk].id, pages[pk].docs, pages[pk].keys); err != nil {
			return err
		}
	}
	return nil
}

// rewriteAllOf writes one page's documents (RewriteAll), trying again
// on a page another writer changed meanwhile, then removes what a build
// before pages left of those it removed.
func (s *Pages) rewriteAllOf(ctx context.Context, pk, id string, docs map[string][]byte, keys []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for range 5 {
		if err = s.rewritePage(ctx, id, pk, docs); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", pk, err)
	}
	for _, k := range keys {
		if docs[strings.TrimPrefix(k, FormulaDocPrefix(id))] == nil {
			_ = s.Raw.Rewrite(ctx, k, nil) // and what a build before pages left
		}
	}
	return nil
}

// keepPages gives a summary about to be rewritten the page count the
// stored one has, or none when it has none; one not stored keeps the
// count it comes with (a rebuild into an emptied bucket: the replay's).
func (s *Pages) keepPages(ctx context.Context, key string, val []byte) ([]byte, error) {
	stored, _, err := s.Raw.Get(ctx, key)
	if err != nil || stored == nil {
		return val, err // none stored: the count the rebuild's replay gave it
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(val, &doc) != nil {
		return val, nil
	}
	delete(doc, "pages")
	if n := summaryPages(stored); n != 0 {
		doc["pages"] = json.RawMessage(strconv.Itoa(n))
	}
	return json.Marshal(doc)
}
