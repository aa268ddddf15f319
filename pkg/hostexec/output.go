package hostexec

import (
	"bytes"
	"sync"
)

// output splits a stream into lines for OnLine and keeps its tail.
type output struct {
	mu      sync.Mutex
	stream  Stream
	onLine  func(Stream, string)
	partial []byte
	tail    []byte
	// marker, when set, swallows the first line if it starts with it and
	// hands the rest of that line to onMarker (the remote process group).
	marker    string
	onMarker  func(string)
	seenFirst bool
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			o.partial = append(o.partial, p...)
			if len(o.partial) > MaxLine { // a very long line: emit what we have
				o.line(o.partial)
				o.partial = o.partial[:0]
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

func (o *output) line(l []byte) {
	if !o.seenFirst {
		o.seenFirst = true
		if o.marker != "" && bytes.HasPrefix(l, []byte(o.marker)) {
			o.onMarker(string(bytes.TrimPrefix(l, []byte(o.marker))))
			return
		}
	}
	o.tail = append(o.tail, l...)
	o.tail = append(o.tail, '\n')
	if len(o.tail) > 2*MaxTail {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-MaxTail:]...)
	}
	if o.onLine != nil {
		s := l
		if len(s) > MaxLine {
			s = s[:MaxLine]
		}
		o.onLine(o.stream, string(s))
	}
}

// flush emits a last line without a newline.
func (o *output) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.partial) > 0 {
		o.line(o.partial)
		o.partial = o.partial[:0]
	}
}

// String returns the tail, at most MaxTail bytes.
func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.tail
	if len(t) > MaxTail {
		t = t[len(t)-MaxTail:]
	}
	return string(t)
}
