package dag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
)

const (
	// DefaultMaxBytes is the largest composition document accepted (1 MiB,
	// also NATS's default maximum payload).
	DefaultMaxBytes = 1 << 20
	// MaxDepth bounds the nesting of a document. A composition needs 5
	// levels; 64 leaves room for anything reasonable and stops pathological
	// input long before it costs anything.
	MaxDepth = 64
)

// CheckSize rejects a document over max bytes (DefaultMaxBytes when max <= 0).
func CheckSize(data []byte, max int) error {
	if max <= 0 {
		max = DefaultMaxBytes
	}
	if len(data) > max {
		var ps problems
		if len(data) == max+1 {
			// what a file read stops at (ReadFile): its size is not known
			ps.add("", 0, CodeTooLarge, "document is over the %d-byte limit (read no further)", max)
		} else {
			ps.add("", 0, CodeTooLarge, "document is %d bytes, over the %d-byte limit", len(data), max)
		}
		return ps.err()
	}
	return nil
}

// ParseJSON parses a JSON document into a Value tree. It rejects duplicate
// keys (which encoding/json would silently merge), nesting deeper than
// MaxDepth, trailing data, and documents over DefaultMaxBytes. Problems come
// back as an *InvalidError.
func ParseJSON(data []byte) (*Value, error) {
	if err := CheckSize(data, 0); err != nil {
		return nil, err
	}
	p := &jsonParser{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	p.dec.UseNumber()
	v, err := p.value(0, "")
	if err == nil {
		if _, terr := p.dec.Token(); terr != io.EOF {
			err = p.fail("", CodeSyntax, "unexpected data after the end of the document")
		}
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

type jsonParser struct {
	data     []byte
	dec      *json.Decoder
	newlines []int
}

// line returns the 1-based line of a byte offset.
func (p *jsonParser) line(off int64) int {
	if p.newlines == nil {
		p.newlines = []int{}
		for i, c := range p.data {
			if c == '\n' {
				p.newlines = append(p.newlines, i)
			}
		}
	}
	return sort.SearchInts(p.newlines, int(off)) + 1
}

func (p *jsonParser) fail(path string, code Code, format string, args ...any) error {
	var ps problems
	ps.add(path, p.line(p.dec.InputOffset()), code, format, args...)
	return ps.err()
}

func (p *jsonParser) tokenErr(path string, err error) error {
	var se *json.SyntaxError
	var ps problems
	switch {
	case errors.As(err, &se):
		ps.add(path, p.line(se.Offset), CodeSyntax, "invalid JSON: %v", se)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		ps.add(path, p.line(int64(len(p.data))), CodeSyntax, "invalid JSON: unexpected end of document")
	default:
		ps.add(path, p.line(p.dec.InputOffset()), CodeSyntax, "invalid JSON: %v", err)
	}
	return ps.err()
}

func (p *jsonParser) value(depth int, path string) (*Value, error) {
	if depth > MaxDepth {
		return nil, p.fail(path, CodeTooDeep, "nesting deeper than %d levels", MaxDepth)
	}
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.tokenErr(path, err)
	}
	line := p.line(p.dec.InputOffset())
	switch t := tok.(type) {
	case nil:
		return &Value{Kind: KindNull, Line: line}, nil
	case bool:
		return &Value{Kind: KindBool, Scalar: strconv.FormatBool(t), Line: line}, nil
	case json.Number:
		return &Value{Kind: KindNumber, Scalar: t.String(), Line: line}, nil
	case string:
		return &Value{Kind: KindString, Scalar: t, Line: line}, nil
	case json.Delim:
		switch t {
		case '[':
			v := &Value{Kind: KindList, Line: line}
			for i := 0; p.dec.More(); i++ {
				item, err := p.value(depth+1, indexPath(path, i))
				if err != nil {
					return nil, err
				}
				v.Items = append(v.Items, item)
			}
			if _, err := p.dec.Token(); err != nil { // ']'
				return nil, p.tokenErr(path, err)
			}
			return v, nil
		case '{':
			v := &Value{Kind: KindMap, Line: line}
			seen := make(map[string]int)
			for p.dec.More() {
				kt, err := p.dec.Token()
				if err != nil {
					return nil, p.tokenErr(path, err)
				}
				key, ok := kt.(string)
				if !ok { // encoding/json reports this as a syntax error first; kept for safety
					return nil, p.fail(path, CodeSyntax, "invalid JSON: object key is not a string")
				}
				kpath := keyPath(path, key)
				if first, dup := seen[key]; dup {
					return nil, p.fail(kpath, CodeDuplicateKey, "key %q given twice (first on line %d)", key, first)
				}
				seen[key] = p.line(p.dec.InputOffset())
				item, err := p.value(depth+1, kpath)
				if err != nil {
					return nil, err
				}
				v.Keys = append(v.Keys, key)
				v.Vals = append(v.Vals, item)
			}
			if _, err := p.dec.Token(); err != nil { // '}'
				return nil, p.tokenErr(path, err)
			}
			return v, nil
		}
	}
	return nil, p.fail(path, CodeSyntax, "invalid JSON: unexpected token %v", fmt.Sprint(tok))
}
