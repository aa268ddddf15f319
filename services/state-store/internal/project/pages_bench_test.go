package project_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// bytesStore counts the values a MemStore is given and their bytes.
type bytesStore struct {
	*project.MemStore
	values, bytes int
}

func (s *bytesStore) PutAll(ctx context.Context, ws []project.Write) {
	for _, w := range ws {
		s.values++
		s.bytes += len(w.Key) + len(w.Val)
	}
	s.MemStore.PutAll(ctx, ws)
}

// BenchmarkPagesWrites writes a document for each of 1,000 links, so
// many links a flush, into pages and a document a value, and reports
// what each stores: values a link and bytes against the documents'
// own. Pages trade values for bytes: a flush rewrites each page it
// changes whole, so the fewer links a flush (a slow chain), the more
// each link's write costs in bytes, and the larger the documents, the
// more that weighs. (Why the per-host documents, about 10 KiB with a
// full log, are values of their own.)
//
//	go test ./services/state-store/internal/project -run '^$' -bench PagesWrites -benchtime 1x
func BenchmarkPagesWrites(b *testing.B) {
	const links = 1000
	for _, size := range []int{600, 10000} {
		for _, perFlush := range []int{200, 20, 1} {
			for _, paged := range []bool{false, true} {
				b.Run(fmt.Sprintf("doc=%d/links-a-flush=%d/pages=%v", size, perFlush, paged), func(b *testing.B) {
					var raw *bytesStore
					for range b.N {
						raw = &bytesStore{MemStore: project.NewMemStore()}
						var s project.Store = raw
						if paged {
							s = &project.Pages{Raw: raw}
						}
						writeLinks(b, s, links, perFlush, []byte(`"`+strings.Repeat("x", size-2)+`"`))
					}
					b.ReportMetric(float64(raw.values)/links, "values/link")
					b.ReportMetric(float64(raw.bytes)/float64(links*size), "bytes/doc-bytes")
				})
			}
		}
	}
}

// BenchmarkPagesWritesAFleet writes the documents of a fleet's run:
// 10,000 formulas of 5 nodes (a formula and 5 node documents of about
// 400 bytes each, written when the formula starts and when it ends),
// 500 formulas running at once in the order they were dispatched, 1,000
// document writes a flush (a write of a document already in the flush
// replaces it there, as the projector's do), into 512 pages and as the
// state-store keeps such a workflow (Unpaged: a document a value). The
// pages hash the keys, so each flush touches about every page: the run
// rewrites the workflow's documents whole about once a flush.
//
//	go test ./services/state-store/internal/project -run '^$' -bench PagesWritesAFleet -benchtime 1x
func BenchmarkPagesWritesAFleet(b *testing.B) {
	const formulas, nodes, running, perFlush = 10000, 5, 500, 1000
	doc := []byte(`"` + strings.Repeat("x", 398) + `"`)
	// As many pages as DocsPerPage would make, and as the state-store
	// keeps it (Unpaged, beyond MaxPagedDocuments).
	for _, pages := range []int{512, project.PagesFor(formulas, formulas*nodes)} {
		b.Run(fmt.Sprintf("pages=%d", pages), func(b *testing.B) {
			var raw *bytesStore
			for range b.N {
				raw = &bytesStore{MemStore: project.NewMemStore()}
				s := &project.Pages{Raw: raw}
				s.PutAll(context.Background(), []project.Write{summary("w", pages)})
				fl := &fleetFlush{b: b, s: s, revs: map[string]uint64{}, in: map[string]bool{}, size: perFlush}
				for i := range formulas + running {
					if i < formulas {
						fl.formula(i, doc) // starts
					}
					if i >= running {
						fl.formula(i-running, doc) // ends
					}
				}
				fl.flush()
			}
			docBytes := float64(formulas * (1 + nodes) * 2 * len(doc))
			b.ReportMetric(float64(raw.values)/float64(formulas*nodes), "values/node")
			b.ReportMetric(float64(raw.bytes)/docBytes, "bytes/doc-bytes")
			b.ReportMetric(float64(raw.bytes)/(1<<20), "MiB")
		})
	}
}

// fleetFlush gathers a fleet's document writes into flushes of size.
type fleetFlush struct {
	b    *testing.B
	s    project.Store
	revs map[string]uint64
	in   map[string]bool
	ws   []project.Write
	size int
}

// formula writes formula i's document and its nodes'.
func (fl *fleetFlush) formula(i int, doc []byte) {
	f := fmt.Sprintf("f%d", i)
	fl.put(project.FormulaDocKey("w", f), doc)
	for n := range 5 {
		fl.put(project.NodeDocKey("w", f, fmt.Sprintf("n%d", n)), doc)
	}
}

func (fl *fleetFlush) put(key string, doc []byte) {
	if !fl.in[key] {
		fl.in[key] = true
		fl.ws = append(fl.ws, project.Write{Key: key, Val: doc, Rev: fl.revs[key]})
	}
	if len(fl.ws) >= fl.size {
		fl.flush()
	}
}

func (fl *fleetFlush) flush() {
	fl.s.PutAll(context.Background(), fl.ws)
	for _, w := range fl.ws {
		if w.Err != nil {
			fl.b.Fatalf("%s: %v", w.Key, w.Err)
		}
		fl.revs[w.Key] = w.NewRev
	}
	fl.ws, fl.in = fl.ws[:0], map[string]bool{}
}

// writeLinks writes doc as the node document of each of links formulas,
// perFlush of them a PutAll, each over the revision it was given.
func writeLinks(b *testing.B, s project.Store, links, perFlush int, doc []byte) {
	ws := []project.Write{summary("w", project.PagesFor(links, links))}
	for start := 0; start < links; start += perFlush {
		for i := start; i < min(links, start+perFlush); i++ {
			ws = append(ws, project.Write{Key: project.NodeDocKey("w", fmt.Sprintf("f%d", i), "n"), Val: doc})
		}
		s.PutAll(context.Background(), ws)
		for _, w := range ws {
			if w.Err != nil {
				b.Fatalf("%s: %v", w.Key, w.Err)
			}
		}
		ws = ws[:0]
	}
}
