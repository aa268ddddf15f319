package hostpattern

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

var inv = Inventory{
	Hosts: []string{"web-1", "web-2", "web-3", "db-1", "db-2", "bastion", "lone"},
	Groups: map[string][]string{
		"web":     {"web-1", "web-2", "web-3"},
		"db":      {"db-1", "db-2"},
		"prod":    {"web-1", "web-2", "db-1"},
		"jump":    {"bastion"},
		"webhook": {"db-2"}, // a group a glob on web* meets too
		"stale":   {"gone"}, // lists a host the inventory does not have
	},
}

// TestMatch: names, groups, all, globs, regular expressions, unions,
// intersections and exclusions, applied in Ansible's order.
func TestMatch(t *testing.T) {
	for _, tc := range []struct{ pattern, want string }{
		{"web", "web-1 web-2 web-3"},
		{"web-2", "web-2"},
		{"all", "bastion db-1 db-2 lone web-1 web-2 web-3"},
		{"*", "bastion db-1 db-2 lone web-1 web-2 web-3"},
		{"ungrouped", "lone"},
		{"web-*", "web-1 web-2 web-3"},
		{"web*", "db-2 web-1 web-2 web-3"}, // group webhook and hosts web-*
		{"*-1", "db-1 web-1"},
		{"web-[13]", "web-1 web-3"},
		{"web-?", "web-1 web-2 web-3"},
		{"~web-[12]", "web-1 web-2"},
		{"~(db|jump)", "bastion db-1 db-2"},
		{"~eb", "gone?"}, // anchored at the start, as Ansible's re.match: no match
		{"web:db", "db-1 db-2 web-1 web-2 web-3"},
		{"web,db", "db-1 db-2 web-1 web-2 web-3"},
		{"web:&prod", "web-1 web-2"},
		{"web:!web-3", "web-1 web-2"},
		{"!web-3:web", "web-1 web-2"}, // exclusions come last, wherever written
		{"&prod:web:db", "db-1 web-1 web-2"},
		{"web:db:&prod:!db-1", "web-1 web-2"},
		{"!web", "bastion db-1 db-2 lone"}, // only & and !: from all
		{"&prod", "db-1 web-1 web-2"},
		{" web : !web-1 ", "web-2 web-3"},
		{"web-1:web-1:web", "web-1 web-2 web-3"},
		{"web-[1:2]", "web-1 web-2"}, // a [...] keeps its ':': a glob whose class is '1', ':' or '2' (not a subscript)
	} {
		p, err := Parse(tc.pattern)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.pattern, err)
			continue
		}
		got, err := p.Match(inv)
		if tc.want == "gone?" {
			var nm *NoMatchError
			if !errors.As(err, &nm) {
				t.Errorf("%q: got %v, %v; want no match", tc.pattern, got, err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.pattern, strings.Join(got, " "), err, tc.want)
		}
	}
}

// TestAnsibleReadings: where Go's own readings differ from Ansible's, the
// pattern is read as Ansible reads it: an IPv6 address is one term, not
// cut at its ':'s; globs are Python's fnmatch ([!1] is "not 1", [^1] is
// '^' or '1'); and a plain term naming a host is that host, though a
// group has the same name.
func TestAnsibleReadings(t *testing.T) {
	inv := Inventory{
		Hosts: []string{"2001:db8::5", "db1", "web01", "web02", "web03", "web^", "app", "app2", `w\1`},
		Groups: map[string][]string{
			"db":  {"2001:db8::5", "db1"},
			"web": {"web01", "web02", "web03"},
			"app": {"app", "app2"},
		},
	}
	for _, tc := range []struct{ pattern, want string }{
		{"2001:db8::5", "2001:db8::5"},
		{"2001:db8::5,db1", "2001:db8::5 db1"},
		{"db,!2001:db8::5", "db1"},
		{"db,&2001:db8::5", "2001:db8::5"},
		{"db:!2001:db8::5", "2001:db8::5 db1"}, // not an address: cut at each ':'; "db8" names nothing
		{"web0[!1]", "web02 web03"},
		{"web[^]", "web^"},
		{"web0[^1]", "web01"},
		{"web0[!1-2]", "web03"},
		{`w\[1]`, `w\1`},
		{"app", "app"},
		{"app*", "app app2"},
		{"all:!app", "2001:db8::5 db1 w\\1 web01 web02 web03 web^"},
	} {
		p, err := Parse(tc.pattern)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.pattern, err)
			continue
		}
		got, err := p.Match(inv)
		if tc.pattern == "db:!2001:db8::5" {
			var nm *NoMatchError
			if !errors.As(err, &nm) || nm.Term != "db8" {
				t.Errorf("%q: got %q, %v; want no match for \"db8\"", tc.pattern, got, err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.pattern, strings.Join(got, " "), err, tc.want)
		}
	}
}

// TestNoMatch: a term that selects nothing is an error naming it and the
// inventory's groups; one whose hosts the intersections take away is not,
// but the result is empty.
func TestNoMatch(t *testing.T) {
	for _, tc := range []struct{ pattern, term string }{
		{"webz", "webz"},
		{"web:dbs", "dbs"},
		{"web:&prd", "&prd"},
		{"web:!web-9", "!web-9"},
		{"nope*", "nope*"},
		{"stale", "stale"}, // its only host is not in the inventory
	} {
		p, err := Parse(tc.pattern)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.pattern, err)
		}
		_, err = p.Match(inv)
		var nm *NoMatchError
		if !errors.As(err, &nm) || nm.Term != tc.term {
			t.Errorf("%q: err %v, want no match for %q", tc.pattern, err, tc.term)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `"`+tc.term+`" matches no host or group`) || !strings.Contains(msg, "its groups: db, jump, prod, stale, ungrouped, web, webhook;") {
			t.Errorf("%q: message %q", tc.pattern, msg)
		}
	}
	p, _ := Parse("web:&db")
	if got, err := p.Match(inv); err != nil || len(got) != 0 {
		t.Errorf("web:&db: %v, %v; want nothing, no error", got, err)
	}
}

// TestParseErrors: what cannot be a pattern is refused with the reason.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ pattern, want string }{
		{"", "names no host or group"},
		{" : , ", "names no host or group"},
		{"web:&", `"&" needs a host or group after it`},
		{"!", `"!" needs a host or group after it`},
		{"web-[1", "bad glob (an unclosed [)"},
		{"web-[2-1]", "bad glob (invalid character class range"},
		{"~web(", "bad regular expression: missing closing )"},
		{strings.Repeat("a", MaxLen+1), "more than 65536"},
	} {
		_, err := Parse(tc.pattern)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.40q): %v, want %q", tc.pattern, err, tc.want)
		}
	}
}

// FuzzPattern: any text either does not parse or matches a sorted set of
// the inventory's hosts, or no host with a NoMatchError; never a panic.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"web", "web:db", "web:&prod:!web-3", "~web-[0-9]+", "web-[13]", "*", "&", "!x", "[", "a,b:c", "~(a|", "web-[1:2]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			return
		}
		got, err := p.Match(inv)
		if err != nil {
			var nm *NoMatchError
			if !errors.As(err, &nm) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Fatalf("%q: not sorted and unique: %v", s, got)
		}
		for _, h := range got {
			if !slices.Contains(inv.Hosts, h) {
				t.Fatalf("%q: %q is not a host of the inventory", s, h)
			}
		}
	})
}
