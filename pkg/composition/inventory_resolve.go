package composition

import (
	"cmp"
	"encoding/binary"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// maxResolveSteps bounds the work of resolving an inventory's groups:
// what 1 MiB of groups and hosts comes to can be far more (a range of
// 100,000 hosts in a group with 30 variables is 3,000,000 variables of
// hosts; a chain of 5,000 groups with a host each is 12,500,000 hosts in
// groups). A step is a host put in one of its groups or one above them, a
// group met on the way up from a group that has hosts, and a group's
// variable merged once for all the hosts listed in the same groups; a
// variable of a host is hostVarSteps. The work is shared so that the steps
// follow what the hosts and groups come to, not the ways between the
// groups: 700 groups, each a child of all before it, with 3 hosts and 2
// variables each (800 kB: 244,650 links, 736,050 hosts in groups) take
// 2,141,371 steps (TestInventoryDense). 30,000,000 take one or two seconds
// (100,000 hosts with 29 variables each; a chain of 5,400 groups with a
// host each goes over).
const maxResolveSteps = 30_000_000

// hostVarSteps is what a variable of a host costs, in steps: making the
// host's map of them costs about ten times what the other steps do.
const hostVarSteps = 10

// maxGroupCycles bounds the cycles of groups reported one by one. Past
// it, one problem says there are more, and the rest are cut without a
// word each, so that the rest of the inventory is still checked.
const maxGroupCycles = 100

// spend counts steps of resolving the groups; past maxResolveSteps it
// reports the inventory too large, once, and returns false.
func (r *invReader) spend(steps int) bool {
	r.steps += steps
	if r.steps <= maxResolveSteps {
		return true
	}
	if !r.tooLarge {
		r.tooLarge = true
		r.fail(r.groups["all"].source, dag.CodeTooLarge, "resolving the inventory takes more than %d steps (a step is a host in one of its groups or a group above them, or a group variable merged; a host's variable is %d): use fewer hosts, variables or levels of groups, or split the inventory", maxResolveSteps, hostVarSteps)
	}
	return false
}

// hostSet is what hosts listed in the same groups share.
type hostSet struct {
	groups []int32           // those groups and their ancestors, all included
	vars   map[string]invVar // the variables of groups, merged
}

// resolve makes the hosts and groups. The work is shared where it can be
// (hosts listed in the same groups share those groups' ancestors and
// merged variables; a group with hosts takes the ancestors found of the
// groups with hosts above it whole), and counted in steps (see
// maxResolveSteps).
func (r *invReader) resolve() *Inventory {
	r.ordered()
	inv := &Inventory{Hosts: map[string]dag.Host{}, Groups: map[string]dag.Group{}, Vars: map[string]map[string]any{}, Ignored: map[string][]string{}}
	if len(r.hostOrder) == 0 {
		return inv
	}
	n := len(r.groupOrder)
	gs := make([]*invGroup, n)
	for i, name := range r.groupOrder {
		gs[i] = r.groups[name]
	}
	// The order in which a host's groups' variables are merged: by depth,
	// ansible_group_priority, then name. As every group is deeper than
	// its parents, it is also an order from all down.
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		ga, gb := gs[a], gs[b]
		return cmp.Or(cmp.Compare(ga.depth, gb.depth), cmp.Compare(ga.priority, gb.priority), strings.Compare(ga.name, gb.name))
	})
	rank := make([]int, n) // a group's place in order
	for i, g := range order {
		rank[g] = i
	}
	parents := make([][]int32, n) // each group's, in order
	for _, p := range order {
		for _, c := range gs[p].children {
			ci := r.groups[c].idx
			parents[ci] = append(parents[ci], p)
		}
	}
	// The ancestors of each group that has hosts, and of all, from all
	// down: each from those of the groups with hosts above it.
	all := r.groups["all"].idx
	a := ancestry{parents: parents, of: make([][]int32, n), mark: make([]uint32, n)}
	for _, g := range order {
		if g == all || len(gs[g].hosts) > 0 {
			a.of[g] = a.up(g)
			if !r.spend(a.spend()) {
				return inv
			}
		}
	}
	// A host is in the groups it is listed in, in all and in all their
	// ancestors, and has their variables merged in order, the later
	// winning: hosts listed in the same groups share both.
	sets := map[string]*hostSet{}
	setOf := make([]*hostSet, len(r.hostOrder))
	var in []int32
	var key []byte
	for i, name := range r.hostOrder {
		in = append(in[:0], all)
		for _, g := range r.hosts[name].groups {
			in = append(in, r.groups[g].idx)
		}
		slices.SortFunc(in, func(x, y int32) int { return cmp.Compare(rank[y], rank[x]) }) // the last in order first
		in = slices.Compact(in)
		key = key[:0]
		for _, g := range in {
			key = binary.LittleEndian.AppendUint32(key, uint32(g))
		}
		s := sets[string(key)]
		if s == nil {
			s = &hostSet{groups: a.union(in), vars: map[string]invVar{}}
			merges := 0
			for _, g := range s.groups {
				// group_vars files over every group's variables written in
				// the inventory, as in Ansible
				merges += mergeVars(s.vars, gs[g].vars, rank[g]) + mergeVars(s.vars, gs[g].fileVars, n+rank[g])
			}
			sets[string(key)] = s
			if !r.spend(a.spend() + merges) {
				return inv
			}
		}
		setOf[i] = s
	}
	// Each group's hosts, sorted: hosts are taken by name.
	byName := make([]int, len(r.hostOrder))
	for i := range byName {
		byName[i] = i
	}
	sort.Slice(byName, func(i, j int) bool { return r.hostOrder[byName[i]] < r.hostOrder[byName[j]] })
	members := make([][]string, n)
	for _, i := range byName {
		for _, g := range setOf[i].groups {
			members[g] = append(members[g], r.hostOrder[i])
		}
		if !r.spend(len(setOf[i].groups)) {
			return inv
		}
	}
	merged := make(map[string]map[string]invVar, len(r.hostOrder))
	for i, name := range r.hostOrder {
		h, vars := r.hosts[name], setOf[i].vars
		if len(h.vars)+len(h.fileVars) > 0 {
			vars = make(map[string]invVar, len(vars)+len(h.vars)+len(h.fileVars))
			maps.Copy(vars, setOf[i].vars)
			mergeVars(vars, h.vars, 2*n)       // above every group's
			mergeVars(vars, h.fileVars, 2*n+1) // host_vars over the inventory's
		}
		merged[name] = vars
		if !r.spend(hostVarSteps * len(vars)) {
			return inv
		}
	}
	jumps := map[string]jumpTo{}
	shared := map[*hostSet]*carried{} // for the hosts with no variables of their own
	for i, name := range r.hostOrder {
		h, jump := r.host(r.hosts[name], merged[name])
		own := len(r.hosts[name].vars)+len(r.hosts[name].fileVars) > 0
		c := shared[setOf[i]]
		if c == nil || own {
			c = r.carry(merged[name], h.Transport == dag.TransportLocal)
			if !own {
				shared[setOf[i]] = c
			}
		}
		h.Vars = maps.Clone(c.text)
		h.TypedVars = slices.Clone(c.names)
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
			h.Via = r.via(name, j, merged)
			inv.Hosts[name] = h
		}
	}
	r.viaCycles(inv.Hosts)
	for i, g := range r.groupOrder {
		if g == "all" || g == "ungrouped" || len(members[i]) == 0 {
			continue
		}
		inv.Groups[g] = dag.Group{Hosts: members[i]}
	}
	return inv
}

// mergeVars merges src into dst at rank: a variable of dst merged at a
// higher rank stays. It returns how many it looked at.
func mergeVars(dst, src map[string]invVar, rank int) int {
	for k, v := range src {
		if w, ok := dst[k]; !ok || w.rank < rank {
			v.rank = rank
			dst[k] = v
		}
	}
	return len(src)
}

// ancestry finds groups' ancestors: of holds those found, each group's
// first.
type ancestry struct {
	parents [][]int32 // each group's, in merge order
	of      [][]int32
	mark    []uint32 // stamp of the last search that met a group
	stamp   uint32
	stack   []int32
	steps   int // since spend
}

// spend returns the steps taken since it was last called.
func (a *ancestry) spend() int {
	s := a.steps
	a.steps = 0
	return s
}

// up returns g and its ancestors, g first. It walks up from g but takes
// the ancestors found of a group on the way whole, and goes up through
// the parents last in merge order first, whose ancestors hold most of the
// others': a group of which every earlier group is a parent costs as
// many steps as it has parents and ancestors.
func (a *ancestry) up(g int32) []int32 {
	a.stamp++
	var out []int32
	a.stack = append(a.stack[:0], g)
	for len(a.stack) > 0 {
		x := a.stack[len(a.stack)-1]
		a.stack = a.stack[:len(a.stack)-1]
		a.steps++
		if a.mark[x] == a.stamp {
			continue
		}
		if found := a.of[x]; found != nil {
			for _, y := range found {
				if a.mark[y] != a.stamp {
					a.mark[y] = a.stamp
					out = append(out, y)
				}
			}
			a.steps += len(found)
			continue
		}
		a.mark[x] = a.stamp
		out = append(out, x)
		a.stack = append(a.stack, a.parents[x]...) // the last in order is taken first
	}
	return out
}

// union returns groups (each with its ancestors found, the last in merge
// order first) and their ancestors.
func (a *ancestry) union(groups []int32) []int32 {
	out := a.of[groups[0]]
	if len(groups) == 1 {
		return out
	}
	a.stamp++
	for _, y := range out {
		a.mark[y] = a.stamp
	}
	a.steps += len(out)
	shared := true
	for _, g := range groups[1:] {
		a.steps++
		if a.mark[g] == a.stamp {
			continue // and so are its ancestors
		}
		if shared {
			out, shared = slices.Clone(out), false
		}
		for _, y := range a.of[g] {
			if a.mark[y] != a.stamp {
				a.mark[y] = a.stamp
				out = append(out, y)
			}
		}
		a.steps += len(a.of[g])
	}
	return out
}

// ordered checks that no group is its own descendant (reporting each
// cycle, and leaving the link that closes it out) and gives each group its
// depth (the longest way down from all) and priority.
func (r *invReader) ordered() {
	for _, name := range r.groupOrder {
		g := r.groups[name]
		if v, ok := g.vars[varPriority]; ok {
			delete(g.vars, varPriority) // Ansible keeps it out of the variables
			n, ok := pythonInt(v.val)
			if !ok {
				r.fail(v.source, dag.CodeType, "%s must be a whole number, got %s", varPriority, shown(v.val))
			}
			g.priority = n
		}
	}
	r.depths()
}

// depths orders the groups from all down (Kahn's algorithm), giving each
// its depth. Groups left over hold a cycle: from the first of them in the
// document, depths follows parents left over until one repeats (every
// group left over has a parent left over), reports that cycle, cuts it
// and goes on ordering from there, which leaves over what ordering again
// from the start would. Past maxGroupCycles cycles, it says so once and
// cuts the rest at links that close them in one depth-first walk.
func (r *invReader) depths() {
	n := len(r.groupOrder)
	gs := make([]*invGroup, n)
	indeg := make([]int, n) // parents not yet ordered
	for i, name := range r.groupOrder {
		gs[i] = r.groups[name]
		gs[i].depth = 0
	}
	for _, g := range gs {
		for _, c := range g.children {
			indeg[r.groups[c].idx]++
		}
	}
	var queue []int32
	for i, d := range indeg {
		if d == 0 {
			queue = append(queue, int32(i))
		}
	}
	ordered := 0
	order := func() {
		for ; ordered < len(queue); ordered++ {
			g := gs[queue[ordered]]
			for _, c := range g.children {
				cg := r.groups[c]
				cg.depth = max(cg.depth, g.depth+1)
				if indeg[cg.idx]--; indeg[cg.idx] == 0 {
					queue = append(queue, cg.idx)
				}
			}
		}
	}
	order()
	next := make([]int, n) // parents before it are ordered (or cut)
	seen := make([]int, n) // the walk that met it, from 1
	at := make([]int, n)   // where, in chain
	var chain []string     // each the parent of the one before
	start := 0
walks:
	for walk := 1; len(queue) < n; walk++ {
		for indeg[start] == 0 {
			start++
		}
		chain = chain[:0]
		cur := int32(start)
		for seen[cur] != walk {
			seen[cur], at[cur] = walk, len(chain)
			chain = append(chain, gs[cur].name)
			ps := gs[cur].parents
			for next[cur] < len(ps) && indeg[r.groups[ps[next[cur]]].idx] == 0 {
				next[cur]++
			}
			if next[cur] == len(ps) { // not reached: see above
				r.cutRest(gs, indeg, &queue)
				order()
				break walks
			}
			cur = r.groups[ps[next[cur]]].idx
		}
		parent, child := r.cycleLink(chain[at[cur]:])
		if walk > maxGroupCycles {
			link := parent.childAt[child]
			r.fail(link, dag.CodeTooLarge, "more than %d cycles of groups: the rest are not reported", maxGroupCycles)
			r.cutRest(gs, indeg, &queue)
			order()
			break
		}
		r.cutCycle(chain[at[cur]:])
		c := r.groups[child].idx
		if indeg[c]--; indeg[c] == 0 {
			queue = append(queue, c)
		}
		order()
	}
}

// cycleLink returns the link of a cycle of groups written last, up holding
// each group's parent after it (and the first's after the last).
func (r *invReader) cycleLink(up []string) (parent *invGroup, child string) {
	n := len(up)
	cut := 0 // the link from up[(cut+1)%n] down to up[cut]
	for i := range up {
		if r.groups[up[(i+1)%n]].childAt[up[i]].line > r.groups[up[(cut+1)%n]].childAt[up[cut]].line {
			cut = i
		}
	}
	return r.groups[up[(cut+1)%n]], up[cut]
}

// cutCycle reports a cycle of groups, up holding each group's parent after
// it (and the first's after the last), and cuts the link written last.
func (r *invReader) cutCycle(up []string) {
	n := len(up)
	parent, child := r.cycleLink(up)
	cut := slices.Index(up, child)
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

// cutRest cuts, without a word, every cycle among the groups left over
// (indeg above 0): at each link back up in a depth-first walk down from
// them, then queues those with no parent left over.
func (r *invReader) cutRest(gs []*invGroup, indeg []int, queue *[]int32) {
	const (
		unseen = iota
		below  // on the way down
		done
	)
	state := make([]uint8, len(gs))
	type frame struct {
		g    int32
		next int // its child to go down to next
	}
	var stack []frame
	var links [][2]int32 // parent, child
	for s := range gs {
		if indeg[s] == 0 || state[s] != unseen {
			continue
		}
		state[s] = below
		stack = append(stack[:0], frame{g: int32(s)})
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			children := gs[f.g].children
			if f.next == len(children) {
				state[f.g] = done
				stack = stack[:len(stack)-1]
				continue
			}
			c := r.groups[children[f.next]].idx
			f.next++
			switch state[c] {
			case unseen:
				state[c] = below
				stack = append(stack, frame{g: c})
			case below:
				links = append(links, [2]int32{f.g, c})
			}
		}
	}
	cut := make(map[[2]int32]bool, len(links))
	for _, l := range links {
		cut[l] = true
	}
	filtered := make([]uint8, len(gs)) // 1: its children, 2: its parents
	for _, l := range links {
		p, c := gs[l[0]], gs[l[1]]
		if filtered[p.idx]&1 == 0 {
			filtered[p.idx] |= 1
			p.children = slices.DeleteFunc(p.children, func(name string) bool { return cut[[2]int32{p.idx, r.groups[name].idx}] })
		}
		if filtered[c.idx]&2 == 0 {
			filtered[c.idx] |= 2
			c.parents = slices.DeleteFunc(c.parents, func(name string) bool { return cut[[2]int32{r.groups[name].idx, c.idx}] })
		}
		if indeg[c.idx]--; indeg[c.idx] == 0 {
			*queue = append(*queue, c.idx)
		}
	}
}
