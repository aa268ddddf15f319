package dag

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MarshalJSON writes the tree as JSON, keys in document order, so a
// document read from YAML or JSON (and changed as a tree) can be sent on
// as JSON that ParseJSON reads back to the same tree, lines aside. A
// number that JSON cannot hold (.inf, .nan) is an error.
func (v *Value) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := v.writeJSON(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (v *Value) writeJSON(b *bytes.Buffer) error {
	if v == nil {
		b.WriteString("null")
		return nil
	}
	switch v.Kind {
	case KindNull:
		b.WriteString("null")
	case KindBool:
		b.WriteString(v.Scalar)
	case KindNumber:
		if !json.Valid([]byte(v.Scalar)) {
			return fmt.Errorf("number %s has no JSON form", v.Scalar)
		}
		b.WriteString(v.Scalar)
	case KindString:
		s, err := json.Marshal(v.Scalar)
		if err != nil {
			return err
		}
		b.Write(s)
	case KindList:
		b.WriteByte('[')
		for i, it := range v.Items {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := it.writeJSON(b); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case KindMap:
		b.WriteByte('{')
		for i, k := range v.Keys {
			if i > 0 {
				b.WriteByte(',')
			}
			s, err := json.Marshal(k)
			if err != nil {
				return err
			}
			b.Write(s)
			b.WriteByte(':')
			if err := v.Vals[i].writeJSON(b); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("unknown value kind %d", v.Kind)
	}
	return nil
}

// Set sets key in a mapping to val, replacing its value or adding the key
// at the end.
func (v *Value) Set(key string, val *Value) {
	for i, k := range v.Keys {
		if k == key {
			v.Vals[i] = val
			return
		}
	}
	v.Keys = append(v.Keys, key)
	v.Vals = append(v.Vals, val)
}

// Strings is a list of strings as a Value.
func Strings(ss []string) *Value {
	l := &Value{Kind: KindList}
	for _, s := range ss {
		l.Items = append(l.Items, &Value{Kind: KindString, Scalar: s})
	}
	return l
}
