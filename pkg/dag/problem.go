package dag

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrInvalid is wrapped by every *InvalidError, so callers can test for a
// rejected composition with errors.Is(err, dag.ErrInvalid).
var ErrInvalid = errors.New("invalid composition")

// Code classifies a Problem for machines; Message is for people.
type Code string

const (
	CodeSyntax       Code = "syntax"        // not valid JSON or YAML
	CodeTooLarge     Code = "too_large"     // over the size limit
	CodeTooDeep      Code = "too_deep"      // nesting deeper than MaxDepth
	CodeAliasBomb    Code = "alias_bomb"    // YAML aliases expand beyond the budget
	CodeDuplicateKey Code = "duplicate_key" // a mapping key given twice
	CodeUnknownField Code = "unknown_field" // a field the format does not have
	CodeType         Code = "type"          // wrong kind of value (string, number, list...)
	CodeRequired     Code = "required"      // a required field is missing or empty
	CodeToken        Code = "token"         // a name that is not a token
	CodeDuplicate    Code = "duplicate"     // a duplicate id or name
	CodeUnknownRef   Code = "unknown_ref"   // a reference to something not defined
	CodeCycle        Code = "cycle"         // a dependency cycle (or self-dependency)
	CodeValue        Code = "value"         // a value out of range or not allowed
	CodeTemplate     Code = "template"      // a command template that does not parse or render
)

// Problem is one thing wrong with a composition, located by its path in the
// document (for example "formulas[3].depends_on[0]") and, where the source
// format knows it, its line.
type Problem struct {
	// File is the file the problem is in when it is not the composition
	// itself: the inventory file a composition names.
	File    string `json:"file,omitempty"`
	Path    string `json:"path"`
	Line    int    `json:"line,omitempty"`
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
	} else {
		b.WriteString("(document)")
	}
	if p.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", p.Line)
	}
	b.WriteString(": ")
	b.WriteString(p.Message)
	return b.String()
}

// InvalidError carries every problem found in a composition at once.
type InvalidError struct {
	Problems []Problem
}

func (e *InvalidError) Error() string {
	lines := make([]string, 0, len(e.Problems)+1)
	lines = append(lines, fmt.Sprintf("%d problem(s) in composition:", len(e.Problems)))
	for _, p := range e.Problems {
		lines = append(lines, "  "+p.String())
	}
	return strings.Join(lines, "\n")
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Messages returns each problem as "path: message".
func (e *InvalidError) Messages() []string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.String()
	}
	return out
}

// problems collects Problems. A path that already has a problem does not get
// a second one from a later pass (so a value with the wrong type is not also
// reported as missing), and neither do the paths below it.
type problems struct {
	list  []Problem
	bad   map[string]bool
	lines map[string]int // source line of each decoded path, when known
}

func (ps *problems) add(path string, line int, code Code, format string, args ...any) {
	if ps.bad == nil {
		ps.bad = make(map[string]bool)
	}
	ps.bad[path] = true
	if line == 0 {
		line = ps.lineOf(path)
	}
	ps.list = append(ps.list, Problem{Path: path, Line: line, Code: code, Message: fmt.Sprintf(format, args...)})
}

// lineOf finds the source line of path, or of its nearest parent that has one.
func (ps *problems) lineOf(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if l := ps.lines[p]; l > 0 {
			return l
		}
	}
	return 0
}

// covered reports whether path or one of its parents already has a problem.
func (ps *problems) covered(path string) bool {
	for p := path; p != ""; p = parentPath(p) {
		if ps.bad[p] {
			return true
		}
	}
	return false
}

// addUnlessCovered is add for the validation pass: it stays quiet where the
// decoding pass already said what is wrong.
func (ps *problems) addUnlessCovered(path string, line int, code Code, format string, args ...any) {
	if ps.covered(path) {
		return
	}
	ps.add(path, line, code, format, args...)
}

func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	out := make([]Problem, len(ps.list))
	copy(out, ps.list)
	// Source order reads best; problems without a line keep their place first.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return &InvalidError{Problems: out}
}

// parentPath strips the last ".field", "[i]" or "[\"key\"]" from a path.
func parentPath(p string) string {
	if strings.HasSuffix(p, "\"]") {
		if i := strings.LastIndex(p, "[\""); i > 0 {
			return p[:i]
		}
	}
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return ""
	}
	return p[:i]
}

func joinPath(parent, field string) string {
	if parent == "" {
		return field
	}
	return parent + "." + field
}

func indexPath(parent string, i int) string {
	return fmt.Sprintf("%s[%d]", parent, i)
}

// IndexPath is the path of item i of a list: "formulas[3]".
func IndexPath(parent string, i int) string { return indexPath(parent, i) }

// KeyPath is the path of a mapping key: "hosts.cp-0".
func KeyPath(parent, key string) string { return keyPath(parent, key) }

// keyPath appends a mapping key: "hosts.cp-0", or "hosts[\"a.b\"]" when the
// key would not read well after a dot.
func keyPath(parent, key string) string {
	if IsToken(key) {
		return joinPath(parent, key)
	}
	return fmt.Sprintf("%s[%q]", parent, key)
}
