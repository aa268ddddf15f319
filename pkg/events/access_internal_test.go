package events

import (
	"slices"
	"testing"
)

func TestJoinWildcards(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"a.b.*", "a.b.*.>", "c"}, []string{"a.b.>", "c"}},
		{[]string{"a.b.*.>", "a.b.*"}, []string{"a.b.>"}},
		{[]string{"a.b.*", "c.*.>"}, []string{"a.b.*", "c.*.>"}},
		{[]string{"a.b.c"}, []string{"a.b.c"}},
	} {
		if got := joinWildcards(c.in); !slices.Equal(got, c.want) {
			t.Errorf("joinWildcards(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
