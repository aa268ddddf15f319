package composition

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// An inventory variable's value is typed as Ansible types it: nil, bool,
// string, json.Number (a number in Python's text of it: 8080, 1.5,
// 1000.0, 1e+16), []any, map[string]any, or Vault for a value encrypted
// with ansible-vault, which gantry does not decrypt.

// Vault stands for a value encrypted with ansible-vault.
type Vault struct{}

// MarshalJSON writes a vault value as ansible-inventory does, without its
// ciphertext.
func (Vault) MarshalJSON() ([]byte, error) { return []byte(`{"__ansible_vault":"***"}`), nil }

// typedValue is a document value as a typed value: numbers in Python's
// text of them (an int in decimal, a float as repr writes it), and
// values tagged !vault as Vault.
func (r *invReader) typedValue(v *dag.Value) any {
	switch v.Kind {
	case dag.KindNull:
		return nil
	case dag.KindBool:
		return v.Scalar == "true"
	case dag.KindNumber:
		return pyNumberText(v.Scalar)
	case dag.KindString:
		if r.vault[v] {
			return Vault{}
		}
		return v.Scalar
	case dag.KindList:
		out := make([]any, len(v.Items))
		for i, it := range v.Items {
			out[i] = r.typedValue(it)
		}
		return out
	case dag.KindMap:
		out := make(map[string]any, len(v.Keys))
		for i, k := range v.Keys {
			out[k] = r.typedValue(v.Vals[i])
		}
		return out
	}
	return nil
}

// pyNumberText is a number's text as Python writes the value it parses
// to: 10, 1.0 for "1.0", 100000.0 for "1e5"; inf and nan, which JSON
// does not have, as text.
func pyNumberText(s string) any {
	if strings.ContainsAny(s, ".eEin") {
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return s
		}
		t := pyFloat(f)
		if !json.Valid([]byte(t)) {
			return t
		}
		return json.Number(t)
	}
	if n, _, ok := bigInt(strings.TrimPrefix(s, "+"), 10); ok {
		return n
	}
	if strings.HasPrefix(s, "-") {
		if n, _, ok := bigInt(s[1:], 10); ok {
			return negate(n)
		}
	}
	return s
}

// varText is a variable as gantry's text vars hold it: numbers as Python
// writes them, booleans as true and false, null as nothing, lists and
// mappings as JSON.
func varText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case bool:
		return strconv.FormatBool(v)
	case string:
		return v
	case json.Number:
		return string(v)
	}
	return jsonText(v)
}

// jsonText writes a value as compact JSON, keys sorted, <, > and & as
// they are.
func jsonText(v any) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// scalarText is a scalar value as text (Python's str of it: True, 2222),
// false for a list, a mapping, null or a vault value.
func scalarText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return string(v), true
	case bool:
		if v {
			return "True", true
		}
		return "False", true
	}
	return "", false
}

// kindOf names a value's type for a message.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "text"
	case json.Number:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	case Vault:
		return "an ansible-vault value"
	}
	return "a value"
}

// ansibleBool reads a boolean as Ansible's boolean() does: true, yes, on,
// 1, y, t (any case) and the number 1 are true; false, no, off, 0, n, f
// and 0 are false; anything else is not a boolean.
func ansibleBool(v any) (bool, bool) {
	switch v := v.(type) {
	case bool:
		return v, true
	case json.Number:
		switch string(v) {
		case "1", "1.0":
			return true, true
		case "0", "0.0":
			return false, true
		}
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "y", "yes", "on", "1", "true", "t":
			return true, true
		case "n", "no", "off", "0", "false", "f":
			return false, true
		}
	}
	return false, false
}

// isJinja says whether text holds a Jinja2 expression or statement, which
// gantry does not evaluate.
func isJinja(s string) bool { return strings.Contains(s, "{{") || strings.Contains(s, "{%") }

// secretLooking says whether a variable's name says it holds a secret:
// it has pass, secret or token in it, or ends in _key.
func secretLooking(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "pass") || strings.Contains(n, "secret") || strings.Contains(n, "token") || strings.HasSuffix(n, "_key")
}

// literalSecret says whether a secret-looking variable holds the secret
// itself: text (not a Jinja2 reference to another variable) or a number.
func literalSecret(name string, v any) bool {
	if !secretLooking(name) {
		return false
	}
	switch v := v.(type) {
	case string:
		return v != "" && !isJinja(v)
	case json.Number:
		return true
	}
	return false
}

// Masked is what gantry prints for a secret's value.
const Masked = "***"

// Shown returns every host's typed variables as gantry prints them: a
// literal secret or an ansible-vault value as ***.
func (inv *Inventory) Shown() map[string]map[string]any {
	out := make(map[string]map[string]any, len(inv.Vars))
	for host, vars := range inv.Vars {
		m := make(map[string]any, len(vars))
		for k, v := range vars {
			if _, vault := v.(Vault); vault || literalSecret(k, v) {
				v = Masked
			}
			m[k] = v
		}
		out[host] = m
	}
	return out
}

// IgnoredCounts lists each ignored ansible_* variable with the number of
// hosts that have it, by name.
func (inv *Inventory) IgnoredCounts() []IgnoredVar {
	n := map[string]int{}
	for _, names := range inv.Ignored {
		for _, k := range names {
			n[k]++
		}
	}
	out := make([]IgnoredVar, 0, len(n))
	for k, c := range n {
		out = append(out, IgnoredVar{Name: k, Hosts: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// IgnoredVar is an ansible_* variable gantry does not act on and how many
// hosts have it.
type IgnoredVar struct {
	Name  string `json:"name"`
	Hosts int    `json:"hosts"`
}
