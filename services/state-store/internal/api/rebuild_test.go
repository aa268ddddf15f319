package api

import (
	"testing"
	"time"
)

// A rebuild takes at most what its client waits, less a tenth (at most a
// second) so that the client hears why when the time is up, and never
// more than MaxRebuildTime.
func TestRebuildTimeout(t *testing.T) {
	for _, c := range []struct {
		ms   int64
		want time.Duration
	}{
		{0, MaxRebuildTime},
		{-5, MaxRebuildTime},
		{2000, 1800 * time.Millisecond},
		{30_000, 29 * time.Second},
		{int64(time.Hour / time.Millisecond), MaxRebuildTime},
	} {
		if got := rebuildTimeout(c.ms); got != c.want {
			t.Errorf("client waits %d ms: %s, want %s", c.ms, got, c.want)
		}
	}
}
