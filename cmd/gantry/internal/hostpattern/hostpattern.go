// Package hostpattern selects hosts of an inventory with Ansible's host
// patterns, as `ansible PATTERN` and `--limit` read them: a host, a group,
// all (or *), a glob (web*), a regular expression (~web-[0-9]+), and
// unions (web:db), intersections (web:&prod) and exclusions (web:!web-3)
// of them.
package hostpattern

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
)

// MaxLen bounds a pattern's length.
const MaxLen = 64 << 10

// Inventory is what a pattern selects from: every host, and the hosts of
// each group. The groups "all" (every host) and "ungrouped" (the hosts in
// no group) need not be listed.
type Inventory struct {
	Hosts  []string
	Groups map[string][]string
}

// Op is how a term combines with the terms before it.
type Op byte

const (
	Union     Op = 0   // web: its hosts are added
	Intersect Op = '&' // &prod: only hosts also in it are kept
	Exclude   Op = '!' // !web-3: its hosts are taken out
)

// Term is one part of a pattern between separators.
type Term struct {
	Op   Op
	Text string         // without its & or !
	re   *regexp.Regexp // for a ~regex term, and a glob's translation
}

// Pattern is a parsed host pattern.
type Pattern struct {
	Source string
	Terms  []Term
}

// Parse reads a pattern: terms separated by ',' or ':' (a ':' inside a
// glob's [...] or an IPv6 address is part of it), each a name, a glob or
// a ~regex, optionally after '&' or '!'.
func Parse(s string) (Pattern, error) {
	p := Pattern{Source: s}
	if len(s) > MaxLen {
		return p, fmt.Errorf("host pattern is %d bytes, more than %d", len(s), MaxLen)
	}
	for _, raw := range split(s) {
		t, err := parseTerm(strings.TrimSpace(raw))
		if err != nil {
			return p, err
		}
		if t.Text != "" {
			p.Terms = append(p.Terms, t)
		}
	}
	if len(p.Terms) == 0 {
		return p, fmt.Errorf("host pattern %q names no host or group", s)
	}
	return p, nil
}

// split cuts s into its terms: at each ',', then each part at each ':'
// outside [...], unless the part is an IPv6 address (2001:db8::5), which
// is one term. (Ansible cuts at ',' only when there is one; a ':' left in
// a part there names nothing.)
func split(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if net.ParseIP(strings.TrimLeft(strings.TrimSpace(part), "&! ")) != nil {
			out = append(out, part)
			continue
		}
		out = append(out, splitColons(part)...)
	}
	return out
}

// splitColons cuts s at each ':' that is not inside [...].
func splitColons(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth = max(depth-1, 0)
		case ':':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseTerm(s string) (Term, error) {
	var t Term
	if s != "" && (s[0] == '&' || s[0] == '!') {
		t.Op, s = Op(s[0]), strings.TrimSpace(s[1:])
		if s == "" {
			return t, fmt.Errorf("host pattern: %q needs a host or group after it", string(t.Op))
		}
	}
	t.Text = s
	switch {
	case strings.HasPrefix(s, "~"):
		re, err := regexp.Compile("^(?:" + s[1:] + ")")
		if err != nil {
			return t, fmt.Errorf("host pattern %q: bad regular expression: %w", s, unwrapRE(err))
		}
		t.re = re
	case isGlob(s):
		re, err := globRE(s)
		if err != nil {
			return t, fmt.Errorf("host pattern %q: bad glob (%w)", s, err)
		}
		t.re = re
	}
	return t, nil
}

// globRE is glob s as a regular expression matching a whole name, read as
// Python's fnmatch reads it (Ansible's globs): * any text, ? one
// character, [...] one of a class, [!...] one not in it; nothing escapes
// (a backslash is itself).
func globRE(s string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^(?s:")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			end := classEnd(s, i)
			if end < 0 {
				return nil, errors.New("an unclosed [")
			}
			b.WriteString(globClass(s[i+1 : end]))
			i = end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(")$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, unwrapRE(err)
	}
	return re, nil
}

// classEnd is the index of the ']' that closes the class opened at s[open]
// (a ']' right after '[' or '[!' is one of the class), or -1.
func classEnd(s string, open int) int {
	j := open + 1
	if j < len(s) && s[j] == '!' {
		j++
	}
	if j < len(s) && s[j] == ']' {
		j++
	}
	if k := strings.IndexByte(s[j:], ']'); k >= 0 {
		return j + k
	}
	return -1
}

// globClass is the body of a glob's class as a regular expression's: a
// leading '!' negates it, '-' between two characters is a range, every
// other character stands for itself.
func globClass(body string) string {
	var b strings.Builder
	b.WriteByte('[')
	if strings.HasPrefix(body, "!") {
		b.WriteByte('^')
		body = body[1:]
	}
	for _, r := range body {
		if r == '-' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') || r >= 0x80 {
			b.WriteRune(r)
		} else {
			b.WriteByte('\\')
			b.WriteRune(r)
		}
	}
	b.WriteByte(']')
	return b.String()
}

func unwrapRE(err error) error {
	var re *syntax.Error
	if errors.As(err, &re) {
		return fmt.Errorf("%s: %q", re.Code, re.Expr)
	}
	return err
}

func isGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

// String is the pattern as given.
func (p Pattern) String() string { return p.Source }

// NoMatchError is a term that selects no host: a typo, most often.
type NoMatchError struct {
	Term   string
	Groups []string // the inventory's groups, sorted
	Hosts  int
}

func (e *NoMatchError) Error() string {
	groups := "none"
	if len(e.Groups) > 0 {
		groups = strings.Join(e.Groups[:min(len(e.Groups), 30)], ", ")
		if len(e.Groups) > 30 {
			groups += fmt.Sprintf(" and %d more", len(e.Groups)-30)
		}
	}
	return fmt.Sprintf("%q matches no host or group of the inventory (its groups: %s; it has %d host(s))", e.Term, groups, e.Hosts)
}

// Match returns the hosts the pattern selects, sorted. As in Ansible,
// the plain terms are taken first (all when there is none), then the
// intersections, then the exclusions, whatever order they are written
// in. A term that selects no host is a *NoMatchError.
func (p Pattern) Match(inv Inventory) ([]string, error) {
	ix := newIndex(inv)
	ordered := order(p.Terms)
	var got map[string]bool
	for _, t := range ordered {
		hosts := ix.match(t)
		if len(hosts) == 0 {
			return nil, &NoMatchError{Term: string(t.Op.prefix()) + t.Text, Groups: ix.groupNames(), Hosts: len(ix.all)}
		}
		got = combine(got, t.Op, hosts)
	}
	out := make([]string, 0, len(got))
	for h := range got {
		out = append(out, h)
	}
	slices.Sort(out)
	return out, nil
}

func (o Op) prefix() string {
	if o == Union {
		return ""
	}
	return string(o)
}

// order puts the plain terms first (all when there is none), then the
// intersections, then the exclusions.
func order(terms []Term) []Term {
	var plain, inter, excl []Term
	for _, t := range terms {
		switch t.Op {
		case Intersect:
			inter = append(inter, t)
		case Exclude:
			excl = append(excl, t)
		default:
			plain = append(plain, t)
		}
	}
	if len(plain) == 0 {
		plain = []Term{{Text: "all"}}
	}
	return slices.Concat(plain, inter, excl)
}

func combine(got map[string]bool, op Op, hosts []string) map[string]bool {
	if got == nil {
		got = map[string]bool{}
	}
	switch op {
	case Intersect:
		keep := make(map[string]bool, len(hosts))
		for _, h := range hosts {
			if got[h] {
				keep[h] = true
			}
		}
		return keep
	case Exclude:
		for _, h := range hosts {
			delete(got, h)
		}
		return got
	}
	for _, h := range hosts {
		got[h] = true
	}
	return got
}

// index is an inventory with all and ungrouped filled in.
type index struct {
	all    []string
	hosts  map[string]bool
	groups map[string][]string
}

func newIndex(inv Inventory) *index {
	ix := &index{hosts: make(map[string]bool, len(inv.Hosts)), groups: make(map[string][]string, len(inv.Groups)+2)}
	for _, h := range inv.Hosts {
		if !ix.hosts[h] {
			ix.hosts[h] = true
			ix.all = append(ix.all, h)
		}
	}
	grouped := map[string]bool{}
	for g, hs := range inv.Groups {
		ix.groups[g] = hs
		for _, h := range hs {
			grouped[h] = true
		}
	}
	ix.groups["all"] = ix.all
	if _, ok := ix.groups["ungrouped"]; !ok {
		var un []string
		for _, h := range ix.all {
			if !grouped[h] {
				un = append(un, h)
			}
		}
		ix.groups["ungrouped"] = un
	}
	return ix
}

func (ix *index) groupNames() []string {
	var out []string
	for g, hs := range ix.groups {
		if g == "all" || g == "ungrouped" && len(hs) == 0 {
			continue
		}
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}

// match is what one term selects, as Ansible's: a plain term naming a host
// is that host; else the hosts of the groups it names, and the hosts it
// names when it names no group or is a glob, a regular expression or has a
// '.' in it.
func (ix *index) match(t Term) []string {
	if t.Text == "*" {
		return ix.all
	}
	if t.Op == Union && ix.hosts[t.Text] {
		return []string{t.Text}
	}
	var out []string
	names := ix.names(t, ix.groupList())
	for _, g := range names {
		out = append(out, ix.groups[g]...)
	}
	if len(names) == 0 || t.re != nil || strings.Contains(t.Text, ".") {
		out = append(out, ix.names(t, ix.all)...)
	}
	return filterKnown(out, ix.hosts)
}

func (ix *index) groupList() []string {
	out := make([]string, 0, len(ix.groups))
	for g := range ix.groups {
		out = append(out, g)
	}
	return out
}

// names are those of list the term matches: by name, glob or regular
// expression.
func (ix *index) names(t Term, list []string) []string {
	var out []string
	for _, n := range list {
		if termMatches(t, n) {
			out = append(out, n)
		}
	}
	return out
}

func termMatches(t Term, name string) bool {
	if t.re != nil {
		return t.re.MatchString(name)
	}
	return t.Text == name
}

// filterKnown keeps the hosts the inventory has (a group may list one it
// does not), each once.
func filterKnown(hosts []string, known map[string]bool) []string {
	seen := make(map[string]bool, len(hosts))
	out := hosts[:0:0]
	for _, h := range hosts {
		if known[h] && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}
