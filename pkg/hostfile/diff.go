package hostfile

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Diffs are bounded: a file larger than MaxDiffInput (on the host or as
// wanted) is not diffed, only said to differ with both sizes; a diff is
// cut at the max its caller gives; one needing more than maxEdits line
// edits is said to differ without the lines.
const (
	MaxDiffInput = 256 << 10
	maxEdits     = 2000
	diffContext  = 3
)

// Diff says how the host's file differs from w (c is what Compare found),
// as a unified diff of its content (the host's first) followed by its
// mode and owner changes, at most max bytes. A secret's content is never
// shown: its diff says only "content differs". "" when nothing differs.
func Diff(ctx context.Context, h *Host, w *Want, c Comparison, max int) (string, error) {
	if !c.Changed() {
		return "", nil
	}
	var b strings.Builder
	content, err := contentDiff(ctx, h, w, c)
	if err != nil {
		return "", err
	}
	b.WriteString(content)
	f := c.Found
	for _, d := range c.Differs {
		switch d {
		case DiffMode:
			fmt.Fprintf(&b, "mode %04o -> %04o\n", f.Mode, w.Mode)
		case DiffOwner:
			fmt.Fprintf(&b, "owner %s -> %s\n", idText(f.Owner, f.UID), w.Owner)
		case DiffGroup:
			fmt.Fprintf(&b, "group %s -> %s\n", idText(f.Group, f.GID), w.Group)
		}
	}
	return Bound(b.String(), max), nil
}

func idText(name, id string) string {
	if name == "" || name == "UNKNOWN" {
		return id
	}
	return name
}

// contentDiff is the content part of Diff.
func contentDiff(ctx context.Context, h *Host, w *Want, c Comparison) (string, error) {
	f := c.Found
	switch {
	case c.contentSame():
		return "", nil
	case f.Kind == KindNoDir:
		return "missing, and so is its directory" + mkdirNote(w) + "\n", nil
	case f.Kind == KindLink:
		return "a symbolic link: it would be replaced by the file\n", nil
	case f.Kind == KindDir:
		return "a directory: the file cannot be placed\n", nil
	case f.Kind == KindOther:
		return "not a regular file: it would be replaced\n", nil
	case w.Secret:
		if f.Kind == KindMissing {
			return "missing (secret content not shown)\n", nil
		}
		return "content differs (secret: not shown)\n", nil
	}
	if w.Size > MaxDiffInput || f.Size > MaxDiffInput {
		return fmt.Sprintf("content differs: %d bytes on the host, %d wanted (too large to show)\n", f.Size, w.Size), nil
	}
	want, err := w.readAll(MaxDiffInput)
	if err != nil {
		return "", fmt.Errorf("%s: %w", w.Path, err)
	}
	var have []byte
	if f.Kind == KindFile {
		if have, err = Current(ctx, h, w.Path, MaxDiffInput); err != nil {
			return "", err
		}
	}
	if !isText(want) || !isText(have) {
		return fmt.Sprintf("binary content differs: %d bytes on the host, %d wanted\n", f.Size, w.Size), nil
	}
	from := "a" + w.Path
	if f.Kind == KindMissing {
		from = "/dev/null"
	}
	d, ok := Unified(string(have), string(want), from, "b"+w.Path)
	if !ok {
		return fmt.Sprintf("content differs: too many changes to show (%d bytes on the host, %d wanted)\n", f.Size, w.Size), nil
	}
	return d, nil
}

func mkdirNote(w *Want) string {
	if w.Mkdir {
		return " (mkdir: true creates it)"
	}
	return " (without mkdir: true the file cannot be placed)"
}

// isText says whether b is UTF-8 without NUL bytes.
func isText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }

// Bound keeps at most max bytes of s, cut at a line's end (or a UTF-8
// boundary), saying how much was cut.
func Bound(s string, max int) string {
	if len(s) <= max || max <= 0 {
		return s
	}
	cut := max - 40
	if cut < 0 {
		cut = 0
	}
	if i := strings.LastIndexByte(s[:cut], '\n'); i > 0 {
		cut = i + 1
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "... (" + strconv.Itoa(len(s)-cut) + " bytes cut)\n"
}

// Unified is the unified diff of a into b by lines, with 3 lines of
// context, headed with the names given; ok is false when it takes more
// than maxEdits line edits. Equal texts give "".
func Unified(a, b, nameA, nameB string) (string, bool) {
	if a == b {
		return "", true
	}
	x, y := splitLines(a), splitLines(b)
	ops, ok := edits(x, y, maxEdits)
	if !ok {
		return "", false
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	for _, h := range hunks(ops) {
		writeHunk(&out, h, x, y)
	}
	return out.String(), true
}

// line is one line with its newline, if it had one.
type line = string

func splitLines(s string) []line {
	if s == "" {
		return nil
	}
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// op is one step of an edit script: keep x[i] (=y[j]), delete x[i] or
// insert y[j].
type op struct {
	kind byte // ' ', '-', '+'
	i, j int
}

// edits is a shortest edit script from x to y (Myers), or ok false past
// max edits.
func edits(x, y []line, max int) ([]op, bool) {
	n, m := len(x), len(y)
	off := max + 1
	v := make([]int, 2*max+3)
	var trace [][]int
	found := -1
	for d := 0; d <= max && found < 0; d++ {
		snap := make([]int, len(v))
		copy(snap, v)
		trace = append(trace, snap)
		for k := -d; k <= d; k += 2 {
			var i int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				i = v[off+k+1] // down: insert
			} else {
				i = v[off+k-1] + 1 // right: delete
			}
			j := i - k
			for i < n && j < m && x[i] == y[j] {
				i, j = i+1, j+1
			}
			v[off+k] = i
			if i >= n && j >= m {
				found = d
				break
			}
		}
	}
	if found < 0 {
		return nil, false
	}
	// Walk back through the snapshots (trace[d] is v before step d):
	// each step is a snake (kept lines) after one edit.
	var rev []op
	i, j := n, m
	for d := found; d > 0; d-- {
		pv := trace[d]
		k := i - j
		insert := k == -d || k != d && pv[off+k-1] < pv[off+k+1]
		pk := k - 1
		if insert {
			pk = k + 1
		}
		pi := pv[off+pk]
		pj := pi - pk
		mi := pi + 1 // where the snake starts, after the edit
		if insert {
			mi = pi
		}
		for i > mi {
			i, j = i-1, j-1
			rev = append(rev, op{' ', i, j})
		}
		if insert {
			rev = append(rev, op{'+', pi, pj})
		} else {
			rev = append(rev, op{'-', pi, pj})
		}
		i, j = pi, pj
	}
	for i > 0 {
		i, j = i-1, j-1
		rev = append(rev, op{' ', i, j})
	}
	out := make([]op, len(rev))
	for k := range rev {
		out[k] = rev[len(rev)-1-k]
	}
	return out, true
}

// hunks groups an edit script into hunks with diffContext lines of
// context around changes.
func hunks(ops []op) [][]op {
	var out [][]op
	start, end := -1, -1 // the current hunk's ops [start, end)
	for k, o := range ops {
		if o.kind == ' ' {
			continue
		}
		lo, hi := max(k-diffContext, 0), min(k+diffContext+1, len(ops))
		if start >= 0 && lo <= end {
			end = max(end, hi)
			continue
		}
		if start >= 0 {
			out = append(out, ops[start:end])
		}
		start, end = lo, hi
	}
	if start >= 0 {
		out = append(out, ops[start:end])
	}
	return out
}

func writeHunk(w *strings.Builder, h []op, x, y []line) {
	ai, bi := h[0].i, h[0].j
	an, bn := 0, 0
	for _, o := range h {
		switch o.kind {
		case ' ':
			an, bn = an+1, bn+1
		case '-':
			an++
		case '+':
			bn++
		}
	}
	fmt.Fprintf(w, "@@ -%s +%s @@\n", rangeText(ai, an), rangeText(bi, bn))
	for _, o := range h {
		l := ""
		switch o.kind {
		case ' ', '-':
			l = x[o.i]
		case '+':
			l = y[o.j]
		}
		w.WriteByte(o.kind)
		w.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			w.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// rangeText is a hunk range: start (from 1) and count, as diff -u writes it.
func rangeText(start, n int) string {
	switch n {
	case 0:
		return strconv.Itoa(start) + ",0"
	case 1:
		return strconv.Itoa(start + 1)
	}
	return strconv.Itoa(start+1) + "," + strconv.Itoa(n)
}
