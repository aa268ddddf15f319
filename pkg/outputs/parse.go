// Package outputs carries the values nodes hand on (a node's `outputs:`):
// it reads the file a node's run writes them to ($GANTRY_OUTPUT), keeps
// them in gantry_outputs, and puts them into the commands that read them
// ({{ output "formula/node" "name" }}, rendered by the planner as markers:
// see dag.OutputRef).
package outputs

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// MaxFileBytes bounds the file a node writes its outputs to: a larger one
// fails the node.
const MaxFileBytes = 64 << 10

// ErrTooLarge: the outputs file is larger than MaxFileBytes.
var ErrTooLarge = fmt.Errorf("the outputs file ($GANTRY_OUTPUT) is larger than %d KiB", MaxFileBytes>>10)

// ErrUndeclared: the file names an output the node does not declare.
var ErrUndeclared = errors.New("an output the node does not declare")

// ErrMalformed: a line of the file is neither `name=value` nor
// `name<<DELIMITER`, or a multi-line value is not closed.
var ErrMalformed = errors.New("malformed outputs file")

// Parse reads an outputs file, as GitHub Actions' $GITHUB_OUTPUT: lines
// `name=value` (the value is the rest of the line, '=' and all), and
// multi-line values written
//
//	name<<DELIMITER
//	line 1
//	line 2
//	DELIMITER
//
// with any delimiter (the value is the lines between, joined by "\n").
// Empty lines between entries are ignored, a "\r" ending a line is
// dropped, and a name given twice keeps its last value. Every name must be
// one of declared; a value must be UTF-8 without NUL bytes or another
// "\r". Errors name the line, and never quote a value.
func Parse(data []byte, declared []dag.Output) (map[string]string, error) {
	if len(data) > MaxFileBytes {
		return nil, ErrTooLarge
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // the newline ending the last line
	}
	out := map[string]string{}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSuffix(lines[i], "\r")
		if line == "" {
			continue
		}
		name, value, next, err := entry(lines, i, line)
		if err != nil {
			return nil, err
		}
		if err := checkEntry(i+1, name, value, declared); err != nil {
			return nil, err
		}
		out[name] = value
		i = next
	}
	return out, nil
}

// entry reads the entry starting at line i (line, its text): its name,
// value and last line.
func entry(lines []string, i int, line string) (name, value string, last int, err error) {
	eq, heredoc := strings.IndexByte(line, '='), strings.Index(line, "<<")
	switch {
	case heredoc > 0 && (eq < 0 || heredoc < eq):
		name, delim := line[:heredoc], line[heredoc+2:]
		if delim == "" {
			return "", "", 0, fmt.Errorf("%w: line %d: a multi-line value needs a delimiter after <<", ErrMalformed, i+1)
		}
		var b strings.Builder
		for j := i + 1; j < len(lines); j++ {
			l := strings.TrimSuffix(lines[j], "\r")
			if l == delim {
				return name, b.String(), j, nil
			}
			if j > i+1 {
				b.WriteByte('\n')
			}
			b.WriteString(l)
		}
		return "", "", 0, fmt.Errorf("%w: line %d: the multi-line value is not closed by a line holding its delimiter (not quoted: the line may hold a secret)", ErrMalformed, i+1)
	case eq > 0:
		return line[:eq], line[eq+1:], i, nil
	}
	return "", "", 0, fmt.Errorf("%w: line %d: expected name=value or name<<DELIMITER (the line is not quoted: it may hold a secret)", ErrMalformed, i+1)
}

func checkEntry(line int, name, value string, declared []dag.Output) error {
	if !slices.ContainsFunc(declared, func(o dag.Output) bool { return o.Name == name }) {
		if !dag.IsOutputName(name) { // not quoted: it may be part of a value
			return fmt.Errorf("%w: line %d: what comes before its '=' or '<<' is not an output name (%s; the node declares %s)", ErrMalformed, line, dag.OutputNameRule, declaredText(declared))
		}
		// Not quoted either: a value written without its name (a base64
		// token, '=' and all) reads as a name.
		return fmt.Errorf("%w: line %d (its name is not quoted: the line may hold a secret; the node declares %s)", ErrUndeclared, line, declaredText(declared))
	}
	switch {
	case !utf8.ValidString(value):
		return fmt.Errorf("%w: line %d: the value of %s is not UTF-8 text", ErrMalformed, line, name)
	case strings.IndexByte(value, 0) >= 0:
		return fmt.Errorf("%w: line %d: the value of %s holds a NUL byte", ErrMalformed, line, name)
	case strings.IndexByte(value, '\r') >= 0:
		return fmt.Errorf("%w: line %d: the value of %s holds a carriage return (\\r) inside a line", ErrMalformed, line, name)
	}
	return nil
}

func declaredText(declared []dag.Output) string {
	if len(declared) == 0 {
		return "none"
	}
	return strings.Join(dag.OutputNames(declared), ", ")
}

// Format writes values as a file Parse reads back: `name=value`, or a
// multi-line block when the value holds a newline.
func Format(values map[string]string) []byte {
	var b bytes.Buffer
	for _, k := range sortedKeys(values) {
		v := values[k]
		if !strings.Contains(v, "\n") {
			fmt.Fprintf(&b, "%s=%s\n", k, v)
			continue
		}
		delim := "EOF"
		for strings.Contains(v, delim) {
			delim += "_"
		}
		fmt.Fprintf(&b, "%s<<%s\n%s\n%s\n", k, delim, v, delim)
	}
	return b.Bytes()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
