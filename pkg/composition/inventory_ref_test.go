package composition

// The resolution gantry had before it was made near-linear (up to commit
// b61e761), kept word for word but for the names (ref...) as the
// reference the new one is checked against: the same hosts, groups,
// variables and problems.

import (
	"net"
	"slices"
	"sort"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

func (r *invReader) refResolve() *Inventory {
	r.refOrdered()
	// A host is in the groups it is listed in and in all their ancestors.
	ancestors := make(map[string][]string, len(r.groups))
	var up func(name string) []string
	up = func(name string) []string {
		if a, ok := ancestors[name]; ok {
			return a
		}
		ancestors[name] = nil // under way: a cycle left (there is none) ends here
		set := []string{name}
		for _, p := range r.groups[name].parents {
			for _, a := range up(p) {
				if !slices.Contains(set, a) {
					set = append(set, a)
				}
			}
		}
		ancestors[name] = set
		return set
	}
	inv := &Inventory{Hosts: map[string]dag.Host{}, Groups: map[string]dag.Group{}, Vars: map[string]map[string]any{}, Ignored: map[string][]string{}}
	members := map[string][]string{}
	merged := map[string]map[string]invVar{}
	for _, name := range r.hostOrder {
		h := r.hosts[name]
		var in []string
		for _, g := range append([]string{"all"}, h.groups...) {
			for _, a := range up(g) {
				if !slices.Contains(in, a) {
					in = append(in, a)
				}
			}
		}
		sort.Slice(in, func(i, j int) bool {
			a, b := r.groups[in[i]], r.groups[in[j]]
			if a.depth != b.depth {
				return a.depth < b.depth
			}
			if a.priority != b.priority {
				return a.priority < b.priority
			}
			return a.name < b.name
		})
		vars := map[string]invVar{}
		for i, g := range in {
			members[g] = append(members[g], name)
			for k, v := range r.groups[g].vars {
				v.rank = i
				vars[k] = v
			}
		}
		for i, g := range in { // group_vars files over the inventory's group vars
			for k, v := range r.groups[g].fileVars {
				v.rank = len(in) + i
				vars[k] = v
			}
		}
		for k, v := range h.vars {
			v.rank = 2 * len(in)
			vars[k] = v
		}
		for k, v := range h.fileVars {
			v.rank = 2*len(in) + 1
			vars[k] = v
		}
		merged[name] = vars
	}
	jumps := map[string]jumpTo{}
	for _, name := range r.hostOrder {
		h, jump := r.host(r.hosts[name], merged[name])
		c := r.carry(merged[name], h.Transport == dag.TransportLocal)
		h.Vars, h.TypedVars = c.text, c.names
		inv.Hosts[name] = h
		inv.Vars[name] = c.typed
		if len(c.ignored) > 0 {
			inv.Ignored[name] = c.ignored
		}
		if jump.host != "" {
			jumps[name] = jump
		}
	}
	for _, name := range r.hostOrder {
		if j, ok := jumps[name]; ok {
			h := inv.Hosts[name]
			h.Via = r.refVia(name, j, merged)
			inv.Hosts[name] = h
		}
	}
	r.refViaCycles(inv.Hosts)
	for _, g := range r.groupOrder {
		if g == "all" || g == "ungrouped" || len(members[g]) == 0 {
			continue
		}
		hosts := slices.Clone(members[g])
		sort.Strings(hosts)
		inv.Groups[g] = dag.Group{Hosts: hosts}
	}
	return inv
}

// ordered checks that no group is its own descendant (reporting each
// cycle, and leaving the link that closes it out) and gives each group its
// depth (the longest way down from all) and priority.
func (r *invReader) refOrdered() {
	for _, name := range r.groupOrder {
		g := r.groups[name]
		if v, ok := g.vars[varPriority]; ok {
			delete(g.vars, varPriority)
			n, ok := pythonInt(v.val)
			if !ok {
				r.fail(v.source, dag.CodeType, "%s must be a whole number, got %s", varPriority, shown(v.val))
			}
			g.priority = n
		}
	}
	for r.refDepths() {
	}
}

// depths orders the groups from all down (Kahn's algorithm), giving each
// its depth. When groups are left over, they hold a cycle: depths reports
// one, cuts it, and returns true to be run again.
func (r *invReader) refDepths() bool {
	indeg := make(map[string]int, len(r.groups))
	for _, g := range r.groups {
		g.depth = 0
		for _, c := range g.children {
			indeg[c]++
		}
	}
	var queue []string
	for _, name := range r.groupOrder {
		if indeg[name] == 0 {
			queue = append(queue, name)
		}
	}
	for len(queue) > 0 {
		g := r.groups[queue[0]]
		queue = queue[1:]
		for _, c := range g.children {
			cg := r.groups[c]
			cg.depth = max(cg.depth, g.depth+1)
			if indeg[c]--; indeg[c] == 0 {
				queue = append(queue, c)
			}
		}
	}
	// From a group left over, follow parents left over until one repeats:
	// every group left over has a parent left over, so one does.
	for _, name := range r.groupOrder {
		if indeg[name] == 0 {
			continue
		}
		seen := map[string]int{}
		var chain []string // each the parent of the one before
		cur := name
		for {
			if at, ok := seen[cur]; ok {
				r.refCutCycle(chain[at:])
				return true
			}
			seen[cur] = len(chain)
			chain = append(chain, cur)
			next := ""
			for _, p := range r.groups[cur].parents {
				if indeg[p] > 0 {
					next = p
					break
				}
			}
			if next == "" {
				break // not reached: see above
			}
			cur = next
		}
	}
	return false
}

// cutCycle reports a cycle of groups, up holding each group's parent after
// it (and the first's after the last), and cuts the link written last.
func (r *invReader) refCutCycle(up []string) {
	n := len(up)
	cut := 0 // the link from up[(cut+1)%n] down to up[cut]
	for i := range up {
		if r.groups[up[(i+1)%n]].childAt[up[i]].line > r.groups[up[(cut+1)%n]].childAt[up[cut]].line {
			cut = i
		}
	}
	parent, child := r.groups[up[(cut+1)%n]], up[cut]
	// Downwards from child: child, its child in the cycle, ..., child.
	names := []string{child}
	for i := 1; i <= n; i++ {
		names = append(names, up[(cut-i+n)%n])
	}
	link := parent.childAt[child]
	r.fail(link, dag.CodeCycle, "group %s is a child of itself: %s", child, strings.Join(names, " -> "))
	parent.children = slices.DeleteFunc(parent.children, func(c string) bool { return c == child })
	r.groups[child].parents = slices.DeleteFunc(r.groups[child].parents, func(p string) bool { return p == parent.name })
}

// via finds the host a jump names: by name, else the one host whose
// ansible_host it is.
func (r *invReader) refVia(name string, jump jumpTo, vars map[string]map[string]invVar) string {
	target := jump.host
	if at := strings.LastIndex(target, "@"); at >= 0 {
		target = target[at+1:]
	}
	if h, _, err := net.SplitHostPort(target); err == nil {
		target = h
	}
	target = strings.Trim(target, "[]")
	found := ""
	if _, ok := r.hosts[target]; ok {
		found = target
	} else {
		for _, other := range r.hostOrder {
			_, a, ok := lastSet(vars[other], varHost)
			if s, text := scalarText(a.val); ok && text && strings.Trim(s, "[]") == target {
				if found != "" {
					r.fail(jump.at, dag.CodeUnknownRef, "ProxyJump %s is the ansible_host of both %s and %s: jump by host name", jump.host, found, other)
					return ""
				}
				found = other
			}
		}
	}
	switch found {
	case "":
		r.fail(jump.at, dag.CodeUnknownRef, "ProxyJump %s is not a host of the inventory: gantry jumps only through hosts it knows; add it", jump.host)
	case name:
		r.fail(jump.at, dag.CodeCycle, "host %s would jump through itself (ProxyJump %s): override the variable on that host", name, jump.host)
		return ""
	}
	return found
}

// viaCycles reports hosts that jump through each other in a ring.
func (r *invReader) refViaCycles(hosts map[string]dag.Host) {
	reported := map[string]bool{}
	for _, name := range r.hostOrder {
		seen := map[string]bool{}
		chain := []string{}
		for cur := name; cur != "" && !reported[cur]; cur = hosts[cur].Via {
			if seen[cur] {
				if cur == name {
					for _, c := range chain {
						reported[c] = true
					}
					h := r.hosts[name]
					r.fail(h.source, dag.CodeCycle, "hosts jump through each other: %s -> %s", strings.Join(chain, " -> "), name)
				}
				break
			}
			seen[cur] = true
			chain = append(chain, cur)
		}
	}
}
