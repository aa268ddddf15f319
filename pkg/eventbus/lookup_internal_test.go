package eventbus

import (
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
)

// Only events are looked for when in doubt, on the subject they went to;
// the earliest doubt of a subject wins.
func TestDoubtReadsTheEventStreamOnly(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		subject string
		stream  string // "" when not looked for
	}{
		{events.HostLifecycle("h1"), events.StreamEvents},
		{events.WorkflowLifecycle("w1"), events.StreamEvents},
		{"decky.h1.health", events.StreamEvents},
		{events.HostDispatch("h1", ""), ""},
		{events.HostGate("h1"), ""},
		{events.HostLogs("h1", "n"), ""},
		{"elsewhere", ""},
	} {
		s := scans{}
		s.doubt(c.subject, t0)
		if got := s[c.subject]; (got == nil) != (c.stream == "") || (got != nil && got.stream != c.stream) {
			t.Errorf("%s: scan %+v, want one of %q", c.subject, got, c.stream)
		}
	}
	s := scans{}
	s.doubt("decky.h1.lifecycle", t0)
	s.doubt("decky.h1.lifecycle", t0.Add(time.Minute))
	if !s["decky.h1.lifecycle"].since.Equal(t0) {
		t.Errorf("a later doubt moved the scan to %v", s["decky.h1.lifecycle"].since)
	}
	s.doubt("decky.h1.lifecycle", t0.Add(-time.Minute))
	if !s["decky.h1.lifecycle"].since.Equal(t0.Add(-time.Minute)) {
		t.Errorf("an earlier doubt left the scan at %v", s["decky.h1.lifecycle"].since)
	}
}
