package composition

import (
	"github.com/gantry-dev/gantry/pkg/dag"
)

// Reading the JSON that `ansible-inventory --list` (or an inventory
// script) writes, as Ansible's script plugin reads it: each key but _meta
// is a group, {hosts: [names], vars: {...}, children: [names]} or just a
// list of hosts; _meta.hostvars holds each host's variables.

// isListJSON says whether a JSON inventory has the shape of --list
// output rather than that of a YAML inventory: a _meta key, or a group
// whose hosts or children are a list.
func isListJSON(root *dag.Value) bool {
	if root.Kind != dag.KindMap {
		return false
	}
	for i, k := range root.Keys {
		g := root.Vals[i]
		if k == "_meta" || g.Kind == dag.KindList {
			return true
		}
		if g.Kind == dag.KindMap {
			for _, sub := range []string{"hosts", "children"} {
				if v := g.Get(sub); v != nil && v.Kind == dag.KindList {
					return true
				}
			}
		}
	}
	return false
}

func (r *invReader) readList(root *dag.Value) {
	var hostvars *dag.Value
	listed := map[string]bool{}
	for i, k := range root.Keys {
		v, path := root.Vals[i], dag.KeyPath("", k)
		if k == "_meta" {
			if v.Kind == dag.KindMap {
				hostvars = v.Get("hostvars")
			}
			continue
		}
		r.readListGroup(k, v, path, listed)
	}
	if hostvars == nil || hostvars.Kind == dag.KindNull {
		return
	}
	if hostvars.Kind != dag.KindMap {
		r.fail(r.at("_meta.hostvars", hostvars.Line), dag.CodeType, "expected a mapping of hosts to their variables, got %s", hostvars.Kind)
		return
	}
	for i, name := range hostvars.Keys {
		if h := r.hosts[name]; h != nil && listed[name] { // a host in no group is not read, as in Ansible
			r.readVars(h.vars, hostvars.Vals[i], dag.KeyPath("_meta.hostvars", name))
		}
	}
}

func (r *invReader) readListGroup(name string, v *dag.Value, path string, listed map[string]bool) {
	at := r.at(path, v.Line)
	g := r.group(name, at)
	switch {
	case v.Kind == dag.KindList:
		v = &dag.Value{Kind: dag.KindMap, Line: v.Line, Keys: []string{"hosts"}, Vals: []*dag.Value{v}}
	case v.Kind != dag.KindMap:
		r.fail(at, dag.CodeType, "expected a group ({hosts, vars, children}) or a list of hosts, got %s", v.Kind)
		return
	case v.Get("hosts") == nil && v.Get("vars") == nil && v.Get("children") == nil:
		// a group with neither is a host of that name with these variables
		v = &dag.Value{Kind: dag.KindMap, Line: v.Line, Keys: []string{"hosts", "vars"},
			Vals: []*dag.Value{{Kind: dag.KindList, Line: v.Line, Items: []*dag.Value{{Kind: dag.KindString, Scalar: name, Line: v.Line}}}, v}}
	}
	if hosts := v.Get("hosts"); hosts != nil {
		r.readListHosts(g, hosts, dag.KeyPath(path, "hosts"), listed)
	}
	if vars := v.Get("vars"); vars != nil {
		r.readVars(g.vars, vars, dag.KeyPath(path, "vars"))
	}
	if children := v.Get("children"); children != nil {
		r.readListChildren(g, children, dag.KeyPath(path, "children"))
	}
}

func (r *invReader) readListHosts(g *invGroup, v *dag.Value, path string, listed map[string]bool) {
	if v.Kind != dag.KindList {
		r.fail(r.at(path, v.Line), dag.CodeType, "expected a list of host names, got %s", v.Kind)
		return
	}
	for i, it := range v.Items {
		at := r.at(dag.IndexPath(path, i), it.Line)
		if it.Kind != dag.KindString || it.Scalar == "" {
			r.fail(at, dag.CodeType, "expected a host name, got %s", it.Kind)
			continue
		}
		if r.addHosts(g, []string{it.Scalar}, nil, at) == nil {
			return
		}
		listed[it.Scalar] = true
	}
}

// readListChildren reads a group's children: a list of names, or the
// keys of a mapping.
func (r *invReader) readListChildren(g *invGroup, v *dag.Value, path string) {
	var names []*dag.Value
	switch v.Kind {
	case dag.KindList:
		names = v.Items
	case dag.KindMap:
		for i, k := range v.Keys {
			names = append(names, &dag.Value{Kind: dag.KindString, Scalar: k, Line: v.Vals[i].Line})
		}
	case dag.KindNull:
		return
	default:
		r.fail(r.at(path, v.Line), dag.CodeType, "expected a list of group names, got %s", v.Kind)
		return
	}
	for i, it := range names {
		at := r.at(dag.IndexPath(path, i), it.Line)
		if it.Kind != dag.KindString || it.Scalar == "" {
			r.fail(at, dag.CodeType, "expected a group name, got %s", it.Kind)
			continue
		}
		r.addChild(g, it.Scalar, at)
	}
}
