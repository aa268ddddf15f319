package composition

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Reading an INI inventory as Ansible's ini inventory plugin does:
//
//   - lines before any section are hosts of ungrouped; [group] lists
//     hosts, [group:vars] variables, [group:children] child groups (which
//     may be declared further down); # and ; start a comment line;
//   - a host line is split as a POSIX shell does (quotes, backslashes, a
//     # starting a comment): a host pattern (web1, web[01:20],
//     10.0.0.5:2222), then key=value variables;
//   - every value, on host lines and in :vars sections alike, is read as a
//     Python literal (5, 1.5, True, None, 'text', [1, 2], {'a': 1}) and
//     kept as text when it is not one (abc, 0755, 10.0.0.1). Ansible's
//     documentation says :vars values stay strings, but its ini plugin
//     (2.14) reads them as literals too: gantry reads what Ansible does.
//
// Where Ansible stops at the first problem, gantry reports every one, each
// with its line.

var (
	iniSection   = regexp.MustCompile(`^\[([^:\]\s]+)(?::([\p{L}\p{N}_]+))?\]\s*(?:#.*)?$`)
	iniGroupName = regexp.MustCompile(`^([^:\]\s]+)\s*(?:#.*)?$`)
)

// iniState is the kind of section being read.
type iniState uint8

const (
	iniHosts iniState = iota
	iniVars
	iniChildren
	iniSkip // after a bad section header, until the next one
)

// iniPending is a group named before it is declared: as a child in a
// [parent:children] section, or by a [group:vars] section.
type iniPending struct {
	at      source
	vars    bool     // named by [group:vars]
	parents []string // the sections that list it as a child
}

type iniReader struct {
	*invReader
	group        *invGroup
	state        iniState
	section      string // the current section's header, for paths
	pending      map[string]*iniPending
	pendingOrder []string
}

func (r *invReader) readINI(data []byte) {
	ir := &iniReader{invReader: r, group: r.groups["ungrouped"], state: iniHosts, section: "[ungrouped]", pending: map[string]*iniPending{}}
	data = []byte(strings.TrimPrefix(string(data), "\ufeff"))
	for i, raw := range splitLines(string(data)) {
		if r.stopped {
			return
		}
		line := strings.TrimSpace(raw)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		at := r.at(ir.section, i+1)
		if !utf8.ValidString(line) {
			r.fail(at, dag.CodeSyntax, "the line is not UTF-8 text")
			continue
		}
		ir.line(line, at)
	}
	ir.undeclared()
}

// splitLines splits text at \n, \r\n and \r.
func splitLines(s string) []string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Split(strings.ReplaceAll(s, "\r", "\n"), "\n")
}

func (ir *iniReader) line(line string, at source) {
	if m := iniSection.FindStringSubmatch(line); m != nil {
		ir.header(m[1], m[2], at)
		return
	}
	if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
		ir.fail(at, dag.CodeSyntax, "bad section header %s: a section is [group], [group:vars] or [group:children], with no spaces", line)
		ir.state = iniSkip
		return
	}
	switch ir.state {
	case iniHosts:
		ir.hostLine(line, at)
	case iniVars:
		ir.varLine(line, at)
	case iniChildren:
		ir.childLine(line, at)
	}
}

// header starts a section. A group is declared by [group] and
// [group:children]; [group:vars] alone does not declare it.
func (ir *iniReader) header(name, kind string, at source) {
	ir.section = "[" + name + "]"
	if kind != "" {
		ir.section = "[" + name + ":" + kind + "]"
	}
	at.path = ir.section
	states := map[string]iniState{"": iniHosts, "hosts": iniHosts, "vars": iniVars, "children": iniChildren}
	state, ok := states[kind]
	if !ok {
		ir.fail(at, dag.CodeSyntax, "section %s has an unknown type %q: use [%s], [%s:vars] or [%s:children]", ir.section, kind, name, name, name)
		ir.state = iniSkip
		return
	}
	if _, known := ir.groups[name]; !known && state == iniVars && ir.pending[name] == nil {
		ir.addPending(name, &iniPending{at: at, vars: true})
	}
	ir.group, ir.state = ir.invReader.group(name, at), state
	if p := ir.pending[name]; p != nil && state != iniVars {
		for _, parent := range p.parents {
			ir.addChild(ir.groups[parent], name, p.at)
		}
		delete(ir.pending, name)
	}
}

func (ir *iniReader) addPending(name string, p *iniPending) {
	ir.pending[name] = p
	ir.pendingOrder = append(ir.pendingOrder, name)
}

// hostLine reads "PATTERN key=value ...".
func (ir *iniReader) hostLine(line string, at source) {
	tokens, err := shlexSplit(line)
	if err != nil {
		ir.fail(at, dag.CodeSyntax, "cannot split the host line %q: %v", line, err)
		return
	}
	if len(tokens) == 0 {
		return
	}
	pattern := tokens[0]
	at.path = ir.section + " " + pattern
	names, port, err := expandHostPattern(pattern)
	if err == nil && port == nil && strings.HasSuffix(pattern, ":") {
		err = fmt.Errorf("host %q ends in ':', which is kept for a port (host:2222)", pattern)
	}
	if err == nil && names[0] == "---" {
		err = fmt.Errorf("host %q: a line --- starts a YAML document, not an INI host", pattern)
	}
	if err != nil {
		ir.fail(at, dag.CodeValue, "%v", err)
		return
	}
	vars := map[string]invVar{}
	var order []string
	for _, t := range tokens[1:] {
		k, v, ok := strings.Cut(t, "=")
		if !ok {
			ir.fail(at, dag.CodeSyntax, "expected key=value after the host, got %q (quote a value that has spaces: key=\"a b\")", t)
			continue
		}
		vat := at
		vat.path += " " + k
		if _, seen := vars[k]; !seen {
			order = append(order, k)
		}
		vars[k] = invVar{val: ir.iniValue(v, vat), source: vat}
	}
	for _, h := range ir.addHosts(ir.group, names, port, at) {
		for _, k := range order {
			h.vars[k] = vars[k]
		}
	}
}

// varLine reads "key = value" in a [group:vars] section: everything after
// the first = is the value.
func (ir *iniReader) varLine(line string, at source) {
	k, v, ok := strings.Cut(line, "=")
	if !ok {
		ir.fail(at, dag.CodeSyntax, "expected key=value in %s, got %q", ir.section, line)
		return
	}
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if k == "" {
		ir.fail(at, dag.CodeSyntax, "a variable needs a name before '=', got %q", line)
		return
	}
	at.path = ir.section + " " + k
	ir.group.vars[k] = invVar{val: ir.iniValue(v, at), source: at}
}

// childLine reads a group name in a [group:children] section.
func (ir *iniReader) childLine(line string, at source) {
	m := iniGroupName.FindStringSubmatch(line)
	if m == nil {
		ir.fail(at, dag.CodeSyntax, "expected a group name in %s, got %q", ir.section, line)
		return
	}
	child := m[1]
	at.path = ir.section + " " + child
	if _, known := ir.groups[child]; known {
		ir.addChild(ir.group, child, at)
		return
	}
	p := ir.pending[child]
	if p == nil {
		p = &iniPending{at: at}
		ir.addPending(child, p)
	}
	p.parents = append(p.parents, ir.group.name)
}

// undeclared reports the groups named but never declared.
func (ir *iniReader) undeclared() {
	for _, name := range ir.pendingOrder {
		p := ir.pending[name]
		switch {
		case p == nil:
		case p.vars:
			ir.fail(p.at, dag.CodeUnknownRef, "section [%s:vars] is for a group that is never declared: add a section [%s] (or list %s in a [parent:children] section and declare it)", name, name, name)
		default:
			ir.fail(p.at, dag.CodeUnknownRef, "group %s is listed as a child but never declared: add a section [%s] or [%s:children]", name, name, name)
		}
	}
}

// iniValue is a value as Ansible reads it: a Python literal, else the
// text as written.
func (ir *iniReader) iniValue(text string, at source) any {
	v, err := pyLiteral(text)
	switch {
	case err == nil:
		return v
	case errors.Is(err, errNotLiteral):
		return text
	}
	ir.fail(at, dag.CodeValue, "value %s is %v", text, err)
	return text
}

// shlexSplit splits a line as Python's shlex.split(line, comments=True)
// does: whitespace separates words; single quotes keep everything, double
// quotes all but a backslash before " or \; a backslash outside quotes
// keeps the next character; # outside quotes starts a comment, even
// within a word.
func shlexSplit(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			end()
		case c == '#':
			end()
			return words, nil
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New("no character after the last backslash")
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("no closing quotation")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			j, err := doubleQuoted(s, i+1, &cur)
			if err != nil {
				return nil, err
			}
			i = j
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	end()
	return words, nil
}

// doubleQuoted copies a double-quoted part starting at i (past the quote)
// and returns the index of its closing quote.
func doubleQuoted(s string, i int, cur *strings.Builder) (int, error) {
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i, nil
		case c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\'):
			i++
			cur.WriteByte(s[i])
		case c == '\\' && i+1 >= len(s):
			return 0, errors.New("no character after the last backslash")
		default:
			cur.WriteByte(c)
		}
	}
	return 0, errors.New("no closing quotation")
}
