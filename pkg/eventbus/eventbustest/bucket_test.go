package eventbustest_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

func TestMemoryBucketFilters(t *testing.T) {
	t.Parallel()
	m := &eventbustest.MemoryBucket[string]{}
	for _, k := range []string{"host.a.web.app.x", "host.b.web.app.y", "host.a.other.app.x", "host.a.web", "hostx.a.web.app.x", "solo"} {
		m.Set(k, k)
	}
	m.SetRaw("host.b.web.app.z", []byte("\x00 not a record"))
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"", []string{"host.a.other.app.x", "host.a.web", "host.a.web.app.x", "host.b.web.app.y", "host.b.web.app.z", "hostx.a.web.app.x", "solo"}},
		{"*", []string{"solo"}},
		{"host.*.web.>", []string{"host.a.web.app.x", "host.b.web.app.y", "host.b.web.app.z"}},
		{"host.a.>", []string{"host.a.other.app.x", "host.a.web", "host.a.web.app.x"}},
		{"host.*.web", []string{"host.a.web"}},
		{"host.a.web.app.x", []string{"host.a.web.app.x"}},
		{"host.*.*.app.*", []string{"host.a.other.app.x", "host.a.web.app.x", "host.b.web.app.y", "host.b.web.app.z"}},
		{"host.c.>", nil},
	} {
		keys, err := m.Keys(context.Background(), tc.filter)
		if err != nil || !slices.Equal(keys, tc.want) {
			t.Errorf("Keys(%q) = %v %v, want %v", tc.filter, keys, err, tc.want)
		}
		if tc.filter == "" {
			continue
		}
		// The damaged record is reported apart, not read, and fails nothing.
		entries, bad, err := m.Entries(context.Background(), tc.filter)
		if err != nil || len(entries)+len(bad) != len(tc.want) {
			t.Errorf("Entries(%q) = %v %v %v, want %v", tc.filter, entries, bad, err, tc.want)
		}
		for _, k := range tc.want {
			if k == "host.b.web.app.z" {
				if !errors.Is(bad[k], events.ErrBadRecord) {
					t.Errorf("Entries(%q): %s reported %v", tc.filter, k, bad[k])
				}
			} else if entries[k] != k {
				t.Errorf("Entries(%q)[%s] = %q", tc.filter, k, entries[k])
			}
		}
	}
}
