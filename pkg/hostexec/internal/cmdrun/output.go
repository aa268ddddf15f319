package cmdrun

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// output splits a stream into lines for OnLine and keeps its tail.
type Output struct {
	mu      sync.Mutex
	Stream  hostexec.Stream
	OnLine  func(hostexec.Stream, string)
	partial []byte // raw: masked only when it is emitted
	tail    []byte
	// Marker, when set, swallows the first line if it starts with it and
	// hands the rest of that line to OnMarker (the remote process group).
	Marker    string
	OnMarker  func(string)
	seenFirst bool
	// Mask, when set, hides the command's secrets in every line and so in
	// the tail.
	Mask *Masker
	// maxLine is where a line without a newline is cut (0: MaxLine); tests
	// set it small.
	maxLine int
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(p)
	maxLine := o.maxLine
	if maxLine <= 0 {
		maxLine = hostexec.MaxLine
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			o.partial = append(o.partial, p...)
			if len(o.partial) > maxLine { // a very long line: emit what we have
				o.cut()
			}
			break
		}
		o.partial = append(o.partial, p[:i]...)
		o.line(o.partial)
		o.partial = o.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

// cut emits the start of a long line that has no newline yet. With
// secrets, the last bytes, where a secret may be starting whose end has
// not arrived, stay behind: the cut never splits a secret (the output
// arrives in chunks of any size), nor a run of overlapping ones, which are
// masked as one.
func (o *Output) cut() {
	c := len(o.partial)
	if o.Mask != nil {
		c -= o.Mask.longest - 1
		for _, iv := range o.Mask.spans(o.partial) {
			if iv[0] < c && c < iv[1] {
				c = iv[0]
				break
			}
		}
		if c <= 0 {
			return
		}
	}
	o.line(o.partial[:c])
	o.partial = o.partial[:copy(o.partial, o.partial[c:])]
}

func (o *Output) line(l []byte) {
	if !o.seenFirst {
		o.seenFirst = true
		// The marker is looked for before masking: a secret may well be
		// part of a pid or of the attempt's path.
		if o.Marker != "" && bytes.HasPrefix(l, []byte(o.Marker)) {
			o.OnMarker(string(bytes.TrimPrefix(l, []byte(o.Marker))))
			return
		}
	}
	if o.Mask != nil {
		l = o.Mask.apply(l)
	}
	o.tail = append(o.tail, l...)
	o.tail = append(o.tail, '\n')
	if len(o.tail) > 2*hostexec.MaxTail {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-hostexec.MaxTail:]...)
	}
	if o.OnLine != nil {
		s := l
		if len(s) > hostexec.MaxLine {
			s = s[:hostexec.MaxLine]
		}
		o.OnLine(o.Stream, string(s))
	}
}

// Flush emits a last line without a newline.
func (o *Output) Flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.partial) > 0 {
		o.line(o.partial)
		o.partial = o.partial[:0]
	}
}

// String returns the tail, at most MaxTail bytes.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.tail
	if len(t) > hostexec.MaxTail {
		t = t[len(t)-hostexec.MaxTail:]
	}
	return string(t)
}

// masked is what a secret's value becomes in output.
const Masked = "***"

// masker replaces a command's secret values in its output. Output is
// masked line by line, so a value of several lines is masked as each of
// its lines, wherever one shows.
type Masker struct {
	vals    [][]byte
	longest int
}

// newMasker returns nil when there is nothing to mask.
func NewMasker(secrets map[string]string, more ...string) *Masker {
	if len(secrets)+len(more) == 0 {
		return nil
	}
	m := &Masker{}
	for _, v := range slices.Concat(slices.Collect(maps.Values(secrets)), more) {
		for piece := range strings.SplitSeq(v, "\n") {
			if piece == "" || slices.ContainsFunc(m.vals, func(b []byte) bool { return string(b) == piece }) {
				continue
			}
			m.vals = append(m.vals, []byte(piece))
			m.longest = max(m.longest, len(piece))
		}
	}
	if len(m.vals) == 0 {
		return nil
	}
	return m
}

// spans returns where the values occur in l, in order, occurrences that
// overlap merged into one (so a value containing another, or two that
// overlap, are hidden whole). Occurrences that merely touch stay apart.
func (m *Masker) spans(l []byte) [][2]int {
	var found [][2]int
	for _, v := range m.vals {
		for i := 0; i+len(v) <= len(l); {
			j := bytes.Index(l[i:], v)
			if j < 0 {
				break
			}
			found = append(found, [2]int{i + j, i + j + len(v)})
			i += j + 1
		}
	}
	if len(found) < 2 {
		return found
	}
	slices.SortFunc(found, func(a, b [2]int) int { return a[0] - b[0] })
	merged := found[:1]
	for _, s := range found[1:] {
		last := &merged[len(merged)-1]
		if s[0] < last[1] {
			last[1] = max(last[1], s[1])
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// cutStart masks the start of b when it is the end of a secret value
// (the longest such end): b was cut from a longer output, maybe inside a
// value, which whole-value masking does not see.
func (m *Masker) cutStart(b []byte) []byte {
	longest := 0
	for _, v := range m.vals {
		for k := len(v) - 1; k > longest; k-- {
			if bytes.HasPrefix(b, v[len(v)-k:]) {
				longest = k
				break
			}
		}
	}
	if longest == 0 {
		return b
	}
	return append([]byte(Masked), b[longest:]...)
}

// apply returns l with each span of secret values replaced by masked.
func (m *Masker) apply(l []byte) []byte {
	spans := m.spans(l)
	if len(spans) == 0 {
		return l
	}
	out := make([]byte, 0, len(l))
	at := 0
	for _, s := range spans {
		out = append(out, l[at:s[0]]...)
		out = append(out, Masked...)
		at = s[1]
	}
	return append(out, l[at:]...)
}
