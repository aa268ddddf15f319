package composition

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
	yaml "go.yaml.in/yaml/v3"
)

// Ansible reads YAML with PyYAML, whose plain scalars follow YAML 1.1:
// yes, no, on and off (in three casings) are booleans, 0755 is octal,
// 1_000 and 1:30 (base 60) are numbers, 1e3 (no point) is text. Ansible
// adds the tags !unsafe (text) and !vault (an encrypted value). Inventory
// files and group_vars/host_vars files are read that way; compositions
// are not.

var (
	yaml11Bool  = regexp.MustCompile(`^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$`)
	yaml11Float = regexp.MustCompile(`^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)
	yaml11Int   = regexp.MustCompile(`^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$`)
	yaml11Null  = regexp.MustCompile(`^(?:~|null|Null|NULL|)$`)
)

// parseInventoryYAML parses one YAML document as Ansible does. It returns
// nil for an empty document, the values tagged !vault, and warnings (a
// key given twice).
func parseInventoryYAML(data []byte) (*dag.Value, map[*dag.Value]bool, []dag.Problem, error) {
	if err := dag.CheckSize(data, 0); err != nil {
		return nil, nil, nil, err
	}
	var c converter
	out, err := func() (v *dag.Value, err error) {
		defer func() { // the YAML library must never take gantry down
			if r := recover(); r != nil {
				v, err = nil, invalid(dag.Problem{Code: dag.CodeSyntax, Message: fmt.Sprintf("invalid YAML: parser failed: %v", r)})
			}
		}()
		doc, err := parseYAMLDoc(data)
		if err != nil || doc == nil {
			return nil, err
		}
		c = converter{budget: 50*countNodes(doc, 0) + 10000, yaml11: true, vault: map[*dag.Value]bool{}}
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return c.value(doc, "", 0), nil
	}()
	if err != nil {
		return nil, nil, nil, err
	}
	if len(c.problems) > 0 {
		return nil, nil, nil, invalid(c.problems...)
	}
	return out, c.vault, c.warnings, nil
}

// scalar11 types a scalar as Ansible's YAML loader does.
func (c *converter) scalar11(n *yaml.Node, path string) *dag.Value {
	v := &dag.Value{Line: n.Line, Scalar: n.Value, Kind: dag.KindString}
	switch {
	case n.Style&yaml.TaggedStyle != 0 && (n.Tag == "!vault" || n.Tag == "!vault-encrypted"):
		v.Scalar = ""
		c.vault[v] = true
		return v
	case n.Style&yaml.TaggedStyle != 0 && n.Tag == "!unsafe":
		return v
	case n.Style&yaml.TaggedStyle != 0:
		return c.scalar(n, path) // !!str, !!int and the like
	case n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		return v
	}
	s := n.Value
	switch {
	case yaml11Bool.MatchString(s):
		v.Kind, v.Scalar = dag.KindBool, strconv.FormatBool(s[0] == 'y' || s[0] == 'Y' || s[0] == 't' || s[0] == 'T' || strings.EqualFold(s, "on"))
	case yaml11Float.MatchString(s):
		v.Kind, v.Scalar = dag.KindNumber, yaml11FloatText(s)
	case yaml11Int.MatchString(s):
		if t, ok := yaml11IntText(s); ok {
			v.Kind, v.Scalar = dag.KindNumber, t
		}
	case yaml11Null.MatchString(s):
		v.Kind, v.Scalar = dag.KindNull, ""
	}
	return v
}

// yaml11IntText is a YAML 1.1 int in decimal: 0b101, 0755 (octal), 0x1F,
// 1_000, 1:30 (base 60), as PyYAML reads them.
func yaml11IntText(s string) (string, bool) {
	s = strings.ReplaceAll(s, "_", "")
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	n := new(big.Int)
	ok := true
	switch {
	case s == "0":
	case strings.HasPrefix(s, "0b"):
		_, ok = n.SetString(s[2:], 2)
	case strings.HasPrefix(s, "0x"):
		_, ok = n.SetString(s[2:], 16)
	case s[0] == '0':
		_, ok = n.SetString(s, 8)
	case strings.Contains(s, ":"):
		for _, part := range strings.Split(s, ":") {
			d, err := strconv.Atoi(part)
			if err != nil {
				return "", false
			}
			n.Mul(n, big.NewInt(60)).Add(n, big.NewInt(int64(d)))
		}
	default:
		_, ok = n.SetString(s, 10)
	}
	if !ok {
		return "", false
	}
	if neg {
		n.Neg(n)
	}
	return n.String(), true
}

// yaml11FloatText is a YAML 1.1 float as Python's repr writes it.
func yaml11FloatText(s string) string {
	s = strings.ToLower(strings.ReplaceAll(s, "_", ""))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	var f float64
	switch {
	case s == ".inf":
		f = math.Inf(1)
	case s == ".nan":
		return "nan"
	case strings.Contains(s, ":"):
		parts := strings.Split(s, ":")
		for _, part := range parts[:len(parts)-1] {
			d, _ := strconv.Atoi(part)
			f = f*60 + float64(d)
		}
		last, _ := strconv.ParseFloat(parts[len(parts)-1], 64)
		f = f*60 + last
	default:
		f, _ = strconv.ParseFloat(s, 64)
	}
	if neg {
		f = -f
	}
	return pyFloat(f)
}

// replace keeps the last of a key given twice, as PyYAML does, with a
// warning.
func (c *converter) replace(m *dag.Value, kn, vn *yaml.Node, kpath string, first, depth int) {
	c.warnings = append(c.warnings, dag.Problem{Path: kpath, Line: kn.Line, Code: dag.CodeDuplicateKey,
		Message: fmt.Sprintf("key %q given twice (first on line %d): the last one is kept, as in Ansible", kn.Value, first)})
	x := c.value(vn, kpath, depth+1)
	for i, k := range m.Keys {
		if k == kn.Value {
			if x == nil {
				m.Keys = append(m.Keys[:i:i], m.Keys[i+1:]...)
				m.Vals = append(m.Vals[:i:i], m.Vals[i+1:]...)
			} else {
				m.Vals[i] = x
			}
			return
		}
	}
	if x != nil {
		m.Keys = append(m.Keys, kn.Value)
		m.Vals = append(m.Vals, x)
	}
}
