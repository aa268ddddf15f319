package service

import (
	"flag"
	"testing"
	"time"
)

// The retention flags, and the prune rule they make.
func TestRetentionFlags(t *testing.T) {
	cases := []struct {
		args []string
		rule string // "" for off
	}{
		{nil, "ended more than 720h0m0s ago and not among the newest 10 finished runs of its composition"},
		{[]string{"--retention-age", "7d", "--retention-keep", "0"}, "ended more than 168h0m0s ago"},
		{[]string{"--retention-age", "0", "--retention-keep", "3"}, "not among the newest 3 finished runs of its composition"},
		{[]string{"--retention-age", "0", "--retention-keep", "0"}, ""},
		{[]string{"--retention-age", "36h"}, "ended more than 36h0m0s ago and not among the newest 10 finished runs of its composition"},
	}
	for _, tc := range cases {
		fs := flag.NewFlagSet("planner", flag.ContinueOnError)
		r := Retention{Age: DefaultRetentionAge, Keep: DefaultRetentionKeep}
		RegisterRetentionFlags(fs, &r)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		rule, on := r.Rule()
		if got := map[bool]string{true: rule.String()}[on]; got != tc.rule {
			t.Errorf("%v: rule %q, want %q", tc.args, got, tc.rule)
		}
	}
	fs := flag.NewFlagSet("planner", flag.ContinueOnError)
	fs.SetOutput(new(nopWriter))
	r := Retention{}
	RegisterRetentionFlags(fs, &r)
	for _, bad := range []string{"soon", "-1d", "-3h"} {
		if err := fs.Parse([]string{"--retention-age", bad}); err == nil {
			t.Errorf("--retention-age %s: no error", bad)
		}
	}
	if got := (*ageFlag)(&[]time.Duration{30 * 24 * time.Hour}[0]).String(); got != "30d" {
		t.Errorf("default shows as %q", got)
	}
}

type nopWriter struct{}

func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
