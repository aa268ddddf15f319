package events_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
)

// TestParseAge: days and Go durations are read; what is not a positive
// age is refused, naming why; a number of days too large for a duration is
// refused rather than wrapped round to a short age (213504d was read as
// about 25 minutes: a prune of every run older than that).
func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "36h": 36 * time.Hour, "90m": 90 * time.Minute, "36500d": 36500 * 24 * time.Hour} {
		if got, err := events.ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"213504d":     "more than 36500 days",
		"106752d":     "more than 36500 days",
		"9999999999d": "more than 36500 days",
		"0d":          "not a positive duration",
		"-5d":         "not a positive duration",
		"x":           "not a duration",
		"5 d":         "not a duration",
	} {
		if d, err := events.ParseAge(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAge(%q) = %v, %v; want an error with %q", in, d, err, want)
		}
	}
}
