package composition

import (
	"github.com/gantry-dev/gantry/pkg/dag"
)

// Reading a YAML inventory (or one in JSON of the same shape), as
// Ansible's yaml inventory plugin does: top-level keys are groups, each
// with hosts, vars and children.

const groupKeys = "a group has hosts, vars and children"

func (r *invReader) readYAML(root *dag.Value) {
	if root.Kind != dag.KindMap {
		r.fail(r.at("", root.Line), dag.CodeType, "an inventory is a mapping of groups (all: {hosts, vars, children}), got %s", root.Kind)
		return
	}
	if p := root.Get("plugin"); p != nil && p.Kind == dag.KindString {
		r.fail(r.at("plugin", p.Line), dag.CodeValue, "this is the configuration of the inventory plugin %s, not an inventory: gantry reads static inventories; write one out with ansible-inventory -i FILE --list > inventory.json and read that", p.Scalar)
		return
	}
	all := r.groups["all"]
	for i, k := range root.Keys {
		parent := all
		if k == "all" {
			parent = nil
		}
		r.readGroup(k, root.Vals[i], dag.KeyPath("", k), parent)
	}
}

func (r *invReader) readGroup(name string, v *dag.Value, path string, parent *invGroup) {
	at := r.at(path, v.Line)
	g := r.group(name, at)
	if parent != nil {
		r.addChild(parent, name, at)
	}
	switch v.Kind {
	case dag.KindNull:
		return
	case dag.KindMap:
	default:
		r.fail(at, dag.CodeType, "expected a group (a mapping: %s), got %s", groupKeys, v.Kind)
		return
	}
	for i, k := range v.Keys {
		val, kpath := shorthand(v.Vals[i]), dag.KeyPath(path, k)
		switch k {
		case "hosts":
			r.readHosts(g, val, kpath)
		case "vars":
			r.readVars(g.vars, val, kpath)
		case "children":
			if val.Kind == dag.KindNull {
				continue
			}
			if val.Kind != dag.KindMap {
				r.fail(r.at(kpath, val.Line), dag.CodeType, "expected a mapping of groups, got %s", val.Kind)
				continue
			}
			for j, c := range val.Keys {
				r.readGroup(c, val.Vals[j], dag.KeyPath(kpath, c), g)
			}
		default:
			r.fail(r.at(kpath, val.Line), dag.CodeUnknownField, "unknown key %q in group %s: %s", k, name, groupKeys)
		}
	}
}

// shorthand is a group's hosts, vars or children as Ansible reads them:
// a name alone (hosts: web-1) is a mapping of that one name to nothing.
func shorthand(v *dag.Value) *dag.Value {
	if v.Kind != dag.KindString {
		return v
	}
	return &dag.Value{Kind: dag.KindMap, Line: v.Line, Keys: []string{v.Scalar}, Vals: []*dag.Value{{Kind: dag.KindNull, Line: v.Line}}}
}

func (r *invReader) readHosts(g *invGroup, v *dag.Value, path string) {
	if v.Kind == dag.KindNull || r.stopped {
		return
	}
	if v.Kind != dag.KindMap {
		r.fail(r.at(path, v.Line), dag.CodeType, "expected a mapping of hosts (name: vars or nothing), got %s", v.Kind)
		return
	}
	for i, key := range v.Keys {
		val, hpath := v.Vals[i], dag.KeyPath(path, key)
		at := r.at(hpath, val.Line)
		names, port, err := expandHostPattern(key)
		if err != nil {
			r.fail(at, dag.CodeValue, "%v", err)
			continue
		}
		hosts := r.addHosts(g, names, port, at)
		if hosts == nil {
			return
		}
		switch val.Kind {
		case dag.KindNull:
		case dag.KindMap:
			for _, h := range hosts {
				r.readVars(h.vars, val, hpath)
			}
		default:
			r.fail(at, dag.CodeType, "expected the host's variables (a mapping) or nothing, got %s", val.Kind)
		}
	}
}

// readVars merges a mapping of variables into dst, later over earlier.
func (r *invReader) readVars(dst map[string]invVar, v *dag.Value, path string) {
	if v.Kind == dag.KindNull {
		return
	}
	if v.Kind != dag.KindMap {
		r.fail(r.at(path, v.Line), dag.CodeType, "expected a mapping of variables, got %s", v.Kind)
		return
	}
	for i, k := range v.Keys {
		val := v.Vals[i]
		dst[k] = invVar{val: r.typedValue(val), source: r.at(dag.KeyPath(path, k), val.Line)}
	}
}
