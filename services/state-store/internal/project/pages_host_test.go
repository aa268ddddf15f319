package project_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

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

// A thousand per-host documents of one composition on one host (a chain
// of a thousand links) are written as its HostPages pages, not a value
// each; another host's and another composition's go to pages of their
// own; every reader finds each, by key and by the filters of a host and
// of a composition on it.
func TestPagesKeepPerHostDocumentsInPages(t *testing.T) {
	raw := &countingStore{MemStore: project.NewMemStore()}
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	var ws []project.Write
	for i := range 1000 {
		ws = append(ws, project.Write{Key: events.HostNodeKey("web-1.example.com", "chain", fmt.Sprintf("f%d", i), "n"), Val: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	putAll(t, s, ws)
	if raw.values > project.HostPages {
		t.Errorf("1,000 per-host documents written as %d values, want at most %d", raw.values, project.HostPages)
	}
	if pages := pageKeys(raw.MemStore, "host-page.web-1_example_com.chain."); len(pages) != raw.values {
		t.Errorf("values written %v, want %d pages of host-page.web-1_example_com.chain", slices.Sorted(maps.Keys(raw.Vals)), raw.values)
	}
	others := []project.Write{
		{Key: events.HostNodeKey("web-2", "chain", "f0", "n"), Val: []byte(`"other host"`)},
		{Key: events.HostNodeKey("web-1.example.com", "site", "f0", "n"), Val: []byte(`"other composition"`)},
	}
	putAll(t, s, others)
	if p := pageKeys(raw.MemStore, "host-page.web-2.chain."); len(p) != 1 {
		t.Errorf("another host's document in pages %v, want one of its own", p)
	}
	if p := pageKeys(raw.MemStore, "host-page.web-1_example_com.site."); len(p) != 1 {
		t.Errorf("another composition's document in pages %v, want one of its own", p)
	}

	fresh := &project.Pages{Raw: raw.MemStore}
	for _, w := range append(ws, others...) {
		if v, rev, err := fresh.Get(ctx, w.Key); string(v) != string(w.Val) || rev != 1 || err != nil {
			t.Fatalf("%s: %s at %d, %v; want %s at 1", w.Key, v, rev, err, w.Val)
		}
	}
	for filter, want := range map[string]int{
		events.HostNodePrefix("web-1.example.com") + ">":              1001,
		events.HostWorkflowPrefix("web-1.example.com", "chain") + ">": 1000,
		events.HostWorkflowPrefix("web-1.example.com", "site") + ">":  1,
		events.HostNodePrefix("web-2") + ">":                          1,
		events.HostNodePrefix("web-3") + ">":                          0,
		"host.>":                                                      1002,
		"host.*.chain.>":                                              1001,
		">":                                                           1002,
		"wf.>":                                                        0,
	} {
		vals, err := fresh.Values(ctx, filter)
		if len(vals) != want || err != nil {
			t.Errorf("Values(%s): %d documents, %v; want %d", filter, len(vals), err, want)
		}
		for k, v := range vals {
			if isPage := strings.Contains(k, "-page.") || strings.Contains(k, "-doc."); isPage || !strings.HasPrefix(string(v), `{"n":`) && !strings.HasPrefix(string(v), `"other`) {
				t.Errorf("Values(%s): %s = %s", filter, k, v)
			}
		}
		if keys, err := fresh.Keys(ctx, filter); len(keys) != want || err != nil {
			t.Errorf("Keys(%s): %d keys, %v; want %d", filter, len(keys), err, want)
		}
	}
}

// A per-host document that a build before pages stored at its own key is
// read there until its first write, which goes to its page (as a
// create); the page's entry is read over it, and a rebuild's removing
// Rewrite takes both.
func TestPagesReadPerHostDocumentsWrittenBefore(t *testing.T) {
	raw := project.NewMemStore()
	ctx := context.Background()
	old, other := events.HostNodeKey("h", "c", "f", "a"), events.HostNodeKey("h", "c", "f", "b")
	putAll(t, raw, []project.Write{{Key: old, Val: []byte(`"before"`)}, {Key: other, Val: []byte(`"untouched"`)}})
	s := &project.Pages{Raw: raw}
	v, rev, err := s.Get(ctx, old)
	if string(v) != `"before"` || rev != 0 || err != nil {
		t.Fatalf("%s: %s at %d, %v; want it, as not yet in its page (0)", old, v, rev, err)
	}
	putAll(t, s, []project.Write{{Key: old, Val: []byte(`"after"`), Rev: rev}})
	if v, rev, _ := (&project.Pages{Raw: raw}).Get(ctx, old); string(v) != `"after"` || rev != 1 {
		t.Errorf("%s after its write: %s at %d, want in its page at 1", old, v, rev)
	}
	vals, err := s.Values(ctx, events.HostNodePrefix("h")+">")
	if err != nil || len(vals) != 2 || string(vals[old]) != `"after"` || string(vals[other]) != `"untouched"` {
		t.Errorf("Values: %s %v", vals, err)
	}
	if err := s.Rewrite(ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	if v, _, err := (&project.Pages{Raw: raw}).Get(ctx, old); v != nil || err != nil {
		t.Errorf("after a removing Rewrite: %s, %v", v, err)
	}
	if _, left := raw.Vals[old]; left {
		t.Errorf("the copy a build before pages left is still there")
	}
}
