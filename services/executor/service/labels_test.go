package service

import (
	"strings"
	"testing"
)

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		in, zone, err string
	}{
		{"", "", ""},
		{"zone=eu-1", "eu-1", ""},
		{" zone = eu-1 ,", "eu-1", ""},
		{"region=eu", "", `unknown label "region": only zone routes work`},
		{"zone", "", "not key=value"},
		{"zone=EU 1", "", "is not a name"},
		{"zone=eu-1,zone=eu-2", "", "zone given twice"},
	} {
		got, err := ParseLabels(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseLabels(%q) err = %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got["zone"] != tc.zone):
			t.Errorf("ParseLabels(%q) = %v, %v; want zone %q", tc.in, got, err, tc.zone)
		}
	}
}
