package dag

import "strconv"

// Kind is the kind of a Value in a parsed document.
type Kind uint8

const (
	KindNull Kind = iota
	KindBool
	KindNumber
	KindString
	KindList
	KindMap
)

func (k Kind) String() string {
	switch k {
	case KindNull:
		return "null"
	case KindBool:
		return "boolean"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindList:
		return "list"
	case KindMap:
		return "mapping"
	}
	return "unknown"
}

// Value is a format-neutral document tree: what JSON and YAML both parse to
// before the composition is decoded from it. Mapping keys keep their order.
// Front ends (ParseJSON here, the YAML reader in pkg/composition) build it;
// Decode reads it. Line is the 1-based source line, or 0 when unknown.
type Value struct {
	Kind   Kind
	Scalar string   // the text of a bool, number or string
	Items  []*Value // KindList
	Keys   []string // KindMap, in document order, no duplicates
	Vals   []*Value // KindMap, Vals[i] belongs to Keys[i]
	Line   int
}

// Get returns the value for key in a mapping, or nil.
func (v *Value) Get(key string) *Value {
	for i, k := range v.Keys {
		if k == key {
			return v.Vals[i]
		}
	}
	return nil
}

// describe renders a value for an error message, bounded in size.
func (v *Value) describe() string {
	switch v.Kind {
	case KindString:
		s := v.Scalar
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return "string " + strconv.Quote(s)
	case KindNumber, KindBool:
		return v.Kind.String() + " " + v.Scalar
	}
	return v.Kind.String()
}
