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
