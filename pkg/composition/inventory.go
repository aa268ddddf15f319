package composition

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Inventory is what an Ansible YAML inventory holds, in gantry's terms:
// the hosts and groups a composition's `inventory:` stands in for.
type Inventory struct {
	Hosts  map[string]dag.Host  `json:"hosts"`
	Groups map[string]dag.Group `json:"groups"`
}

// ReadInventoryFile reads an Ansible YAML inventory file, at most
// dag.DefaultMaxBytes of it.
func ReadInventoryFile(path string) (*Inventory, error) {
	data, err := readBounded(path, "inventory")
	if err != nil {
		return nil, err
	}
	return ReadInventory(path, data)
}

// readBounded reads a file, stopping one byte past dag.DefaultMaxBytes so
// that an enormous file is refused without being read whole.
func readBounded(path, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, dag.DefaultMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	return data, nil
}

// ReadInventory maps an Ansible YAML inventory onto hosts and groups:
//
//   - each host becomes a dag.Host: its address is ansible_host (else its
//     name) with :ansible_port when given, its user ansible_user,
//     ansible_connection local makes it transport local, and a ProxyJump
//     (-o ProxyJump=NAME or -J NAME in ansible_ssh_common_args or
//     ansible_ssh_extra_args) to a host of the inventory becomes via;
//     every other variable becomes one of its vars, as text;
//   - variables take precedence as in Ansible: all's vars, then each
//     group's from parents to children (groups at the same depth by
//     ansible_group_priority, then name), then the host's own;
//   - each group but all and ungrouped becomes a dag.Group of every host
//     in it or in its children, at any depth, sorted.
//
// Every problem comes back at once as a *dag.InvalidError whose problems
// carry name as their File, a path such as
// all.children.web.hosts.web-1.ports and the line.
func ReadInventory(name string, data []byte) (*Inventory, error) {
	root, err := Parse(name, data)
	if err != nil {
		var bad *dag.InvalidError
		if errors.As(err, &bad) {
			for i, p := range bad.Problems {
				if p.Code == dag.CodeSyntax {
					bad.Problems[i].Message += "; " + notINI
				}
			}
		}
		return nil, withFile(err, name)
	}
	r := invReader{groups: map[string]*invGroup{}, hosts: map[string]*invHost{}, listed: map[[2]string]bool{}}
	r.read(root)
	inv := r.resolve()
	if len(r.problems) > 0 {
		return nil, withFile(invalid(r.sorted()...), name)
	}
	return inv, nil
}

// sorted returns the problems in source order, each once (a group's bad
// variable is found again for each of its hosts).
func (r *invReader) sorted() []dag.Problem {
	seen := map[dag.Problem]bool{}
	var out []dag.Problem
	for _, p := range r.problems {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// withFile sets File on every problem of an *dag.InvalidError.
func withFile(err error, file string) error {
	inv, ok := err.(*dag.InvalidError)
	if !ok {
		return err
	}
	for i := range inv.Problems {
		if inv.Problems[i].File == "" {
			inv.Problems[i].File = file
		}
	}
	return inv
}

// source is where a value was written.
type source struct {
	path string
	line int
}

type invVar struct {
	val string
	source
	rank int // in a host's merged vars: higher was merged later, and wins
}

type invGroup struct {
	name     string
	source   // first definition
	vars     map[string]invVar
	hosts    []string // listed in it directly
	children []string
	childAt  map[string]source // where each child was listed
	parents  []string
	depth    int
	priority int
	idx      int32 // its place in groupOrder
}

type invHost struct {
	name string
	source
	vars   map[string]invVar // its own, merged in document order
	groups []string          // listed directly in
}

type invReader struct {
	expanded   int  // hosts read, ranges expanded
	stopped    bool // too many: nothing more is read
	groups     map[string]*invGroup
	groupOrder []string
	hosts      map[string]*invHost
	hostOrder  []string
	listed     map[[2]string]bool // host, group: the host is listed in it
	problems   []dag.Problem
	steps      int                 // of resolving the groups
	tooLarge   bool                // steps are over maxResolveSteps
	byAddress  map[string][]string // ansible_host: the first two hosts with it
}

func (r *invReader) fail(path string, line int, code dag.Code, format string, args ...any) {
	r.problems = append(r.problems, dag.Problem{Path: path, Line: line, Code: code, Message: fmt.Sprintf(format, args...)})
}

const notINI = "INI inventories are not read: convert one with ansible-inventory -i FILE --list -y"

const groupKeys = "a group has hosts, vars and children"

func (r *invReader) read(root *dag.Value) {
	if root.Kind != dag.KindMap {
		r.fail("", root.Line, dag.CodeType, "an inventory is a mapping of groups (all: {hosts, vars, children}), got %s; %s", root.Kind, notINI)
		return
	}
	all := r.group("all", source{"all", root.Line})
	for i, k := range root.Keys {
		parent := all
		if k == "all" {
			parent = nil
		}
		r.readGroup(k, root.Vals[i], dag.KeyPath("", k), parent)
	}
}

func (r *invReader) group(name string, at source) *invGroup {
	g := r.groups[name]
	if g == nil {
		g = &invGroup{name: name, idx: int32(len(r.groupOrder)), source: at, vars: map[string]invVar{}, childAt: map[string]source{}}
		r.groups[name] = g
		r.groupOrder = append(r.groupOrder, name)
	}
	return g
}

func (r *invReader) readGroup(name string, v *dag.Value, path string, parent *invGroup) {
	_, known := r.groups[name]
	g := r.group(name, source{path, v.Line})
	if !known && !dag.IsToken(name) {
		r.fail(path, v.Line, dag.CodeToken, "group name %s%s", dag.TokenProblem(name), suggestion(name, false))
	}
	if parent != nil {
		if _, dup := parent.childAt[name]; !dup {
			parent.children = append(parent.children, name)
			parent.childAt[name] = source{path, v.Line}
			g.parents = append(g.parents, parent.name)
		}
	}
	switch v.Kind {
	case dag.KindNull:
		return
	case dag.KindMap:
	default:
		r.fail(path, v.Line, dag.CodeType, "expected a group (a mapping: %s), got %s", groupKeys, v.Kind)
		return
	}
	for i, k := range v.Keys {
		val, kpath := v.Vals[i], dag.KeyPath(path, k)
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
				r.fail(kpath, val.Line, dag.CodeType, "expected a mapping of groups, got %s", val.Kind)
				continue
			}
			for j, c := range val.Keys {
				r.readGroup(c, val.Vals[j], dag.KeyPath(kpath, c), g)
			}
		default:
			r.fail(kpath, val.Line, dag.CodeUnknownField, "unknown key %q in group %s: %s", k, name, groupKeys)
		}
	}
}

func (r *invReader) readHosts(g *invGroup, v *dag.Value, path string) {
	if v.Kind == dag.KindNull || r.stopped {
		return
	}
	if v.Kind != dag.KindMap {
		r.fail(path, v.Line, dag.CodeType, "expected a mapping of hosts (name: vars or nothing), got %s", v.Kind)
		return
	}
	for i, key := range v.Keys {
		val, hpath := v.Vals[i], dag.KeyPath(path, key)
		names, err := expandHosts(key)
		if err != nil {
			r.fail(hpath, val.Line, dag.CodeValue, "host range %q: %v", key, err)
			continue
		}
		if r.expanded += len(names); r.expanded > maxHosts {
			r.fail(hpath, val.Line, dag.CodeTooLarge, "more than %d hosts in the inventory", maxHosts)
			r.stopped = true
			return
		}
		tokenChecked := false
		for _, name := range names {
			r.readHost(g, name, key, val, hpath, &tokenChecked)
		}
	}
}

// maxHosts bounds the hosts an inventory may make, ranges expanded.
const maxHosts = 100000

// readHost reads one host of a group, as written (key) or made by a range.
// Of a range's hosts, only the first whose name is not a token says so.
func (r *invReader) readHost(g *invGroup, name, key string, val *dag.Value, hpath string, tokenChecked *bool) {
	h := r.hosts[name]
	if h == nil {
		h = &invHost{name: name, source: source{hpath, val.Line}, vars: map[string]invVar{}}
		r.hosts[name] = h
		r.hostOrder = append(r.hostOrder, name)
		if !dag.IsToken(name) && !*tokenChecked {
			*tokenChecked = true
			hasAddr := val.Kind == dag.KindMap && (val.Get("ansible_host") != nil || val.Get("ansible_ssh_host") != nil)
			if name == key {
				r.fail(hpath, val.Line, dag.CodeToken, "host name %s%s", dag.TokenProblem(name), suggestion(name, !hasAddr))
			} else {
				r.fail(hpath, val.Line, dag.CodeToken, "host name %s (made by the range %s)%s", dag.TokenProblem(name), key, suggestion(name, !hasAddr))
			}
		}
	}
	if !r.listed[[2]string{name, g.name}] {
		r.listed[[2]string{name, g.name}] = true
		h.groups = append(h.groups, g.name)
		g.hosts = append(g.hosts, name)
	}
	switch val.Kind {
	case dag.KindNull:
	case dag.KindMap:
		r.readVars(h.vars, val, hpath)
	default:
		r.fail(hpath, val.Line, dag.CodeType, "expected the host's variables (a mapping) or nothing, got %s", val.Kind)
	}
}

// readVars merges a mapping of variables into dst, later over earlier.
func (r *invReader) readVars(dst map[string]invVar, v *dag.Value, path string) {
	if v.Kind == dag.KindNull {
		return
	}
	if v.Kind != dag.KindMap {
		r.fail(path, v.Line, dag.CodeType, "expected a mapping of variables, got %s", v.Kind)
		return
	}
	for i, k := range v.Keys {
		val, kpath := v.Vals[i], dag.KeyPath(path, k)
		switch val.Kind {
		case dag.KindString, dag.KindNumber, dag.KindBool, dag.KindNull:
			dst[k] = invVar{val: val.Scalar, source: source{kpath, val.Line}}
		default:
			r.fail(kpath, val.Line, dag.CodeType, "expected a string, number or boolean, got a %s: gantry variables are text", val.Kind)
		}
	}
}

// suggestion proposes a token for a name that is not one.
func suggestion(name string, address bool) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_' && b.Len() > 0:
			b.WriteRune(c)
			dash = false
		case b.Len() > 0 && !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.TrimRight(b.String(), "-_")
	if len(s) > dag.MaxTokenLen {
		s = strings.TrimRight(s[:dag.MaxTokenLen], "-_")
	}
	msg := ""
	if !dag.IsToken(s) {
		return msg
	}
	msg += fmt.Sprintf("; write it as %s", s)
	if address {
		msg += fmt.Sprintf(" with ansible_host: %s", name)
	}
	return msg
}

// Connection variables, with the older names Ansible still reads.
var (
	varHost       = []string{"ansible_host", "ansible_ssh_host"}
	varPort       = []string{"ansible_port", "ansible_ssh_port"}
	varUser       = []string{"ansible_user", "ansible_ssh_user"}
	varConnection = []string{"ansible_connection"}
	varSSHArgs    = []string{"ansible_ssh_common_args", "ansible_ssh_extra_args"}
	varPasswords  = []string{"ansible_password", "ansible_ssh_pass", "ansible_ssh_password", "ansible_become_password", "ansible_become_pass"}
	varPriority   = "ansible_group_priority"
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
		r.fail("", r.groups["all"].line, dag.CodeTooLarge, "resolving the inventory takes more than %d steps (a step is a host in one of its groups or a group above them, or a group variable merged; a host's variable is %d): use fewer hosts, variables or levels of groups, or split the inventory", maxResolveSteps, hostVarSteps)
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
	inv := &Inventory{Hosts: map[string]dag.Host{}, Groups: map[string]dag.Group{}}
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
				for k, v := range gs[g].vars {
					if w, ok := s.vars[k]; !ok || w.rank < rank[g] {
						v.rank = rank[g]
						s.vars[k] = v
					}
				}
				merges += len(gs[g].vars)
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
		if len(h.vars) > 0 {
			vars = make(map[string]invVar, len(vars)+len(h.vars))
			maps.Copy(vars, setOf[i].vars)
			for k, v := range h.vars {
				v.rank = n // above every group's
				vars[k] = v
			}
		}
		merged[name] = vars
		if !r.spend(hostVarSteps * len(vars)) {
			return inv
		}
	}
	jumps := map[string]invVar{}
	for _, name := range r.hostOrder {
		h, jump := r.host(r.hosts[name], merged[name])
		inv.Hosts[name] = h
		if jump.val != "" {
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
			delete(g.vars, varPriority)
			n, err := strconv.Atoi(v.val)
			if err != nil {
				r.fail(v.path, v.line, dag.CodeType, "%s must be a whole number, got %q", varPriority, v.val)
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
			r.fail(link.path, link.line, dag.CodeTooLarge, "more than %d cycles of groups: the rest are not reported", maxGroupCycles)
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
	r.fail(link.path, link.line, dag.CodeCycle, "group %s is a child of itself: %s", child, strings.Join(names, " -> "))
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

// first returns the one of names (a variable and its older spellings) set
// with the highest precedence in a host's merged vars; at the same
// precedence the first of names.
func first(vars map[string]invVar, names []string) (invVar, bool) {
	var best invVar
	found := false
	for _, n := range names {
		if v, ok := vars[n]; ok && (!found || v.rank > best.rank) {
			best, found = v, true
		}
	}
	return best, found
}

// host maps one host's merged variables, returning it and its jump host as
// written (resolved to a host by via).
func (r *invReader) host(ih *invHost, vars map[string]invVar) (dag.Host, invVar) {
	var h dag.Host
	special := map[string]bool{}
	for _, names := range [][]string{varHost, varPort, varUser, varConnection, varSSHArgs} {
		for _, n := range names {
			special[n] = true
		}
	}
	for _, n := range varPasswords {
		if v, ok := vars[n]; ok {
			r.fail(v.path, v.line, dag.CodeValue, "%s: gantry takes no passwords from an inventory (vars travel as plain text): it logs in with SSH keys; remove it", n)
			special[n] = true
		}
	}
	conn, _ := first(vars, varConnection)
	switch conn.val {
	case "", "ssh", "smart", "paramiko", "paramiko_ssh": // ssh, gantry's default
	case "local":
		h.Transport = dag.TransportLocal
	default:
		r.fail(conn.path, conn.line, dag.CodeValue, "ansible_connection %q is not supported: gantry reaches hosts over ssh or local", conn.val)
	}
	addr, hasAddr := first(vars, varHost)
	port, hasPort := first(vars, varPort)
	user, _ := first(vars, varUser)
	if h.Transport != dag.TransportLocal {
		host := ih.name
		if hasAddr {
			host = addr.val
		}
		h.Address, h.User = host, user.val
		if hasPort {
			if n, err := strconv.Atoi(port.val); err != nil || n < 1 || n > 65535 {
				r.fail(port.path, port.line, dag.CodeValue, "ansible_port %q is not a port (1-65535)", port.val)
			} else {
				h.Address = net.JoinHostPort(strings.Trim(host, "[]"), port.val)
			}
		}
	}
	// The host's own problems as a composition would have them, at the
	// variable they come from.
	if dag.IsToken(ih.name) {
		for _, p := range dag.HostProblems(ih.name, h) {
			at := ih.source
			switch {
			case strings.HasSuffix(p.Path, ".address") && hasAddr:
				at = addr.source
			case strings.HasSuffix(p.Path, ".address") && hasPort:
				at = port.source
			case strings.HasSuffix(p.Path, ".user"):
				at = user.source
			}
			r.fail(at.path, at.line, p.Code, "%s", p.Message)
		}
	}
	var jump invVar
	for _, n := range varSSHArgs {
		v, ok := vars[n]
		if !ok || h.Transport == dag.TransportLocal {
			continue
		}
		j, err := proxyJump(v.val)
		if err != nil {
			r.fail(v.path, v.line, dag.CodeValue, "%s: %v", n, err)
			continue
		}
		if j != "" && jump.val != "" && j != jump.val {
			r.fail(v.path, v.line, dag.CodeValue, "%s jumps through %s, but %s through %s: give one", n, j, jump.path, jump.val)
			continue
		}
		if j != "" {
			jump = invVar{val: j, source: v.source}
		}
	}
	for k, v := range vars {
		if special[k] {
			continue
		}
		if h.Vars == nil {
			h.Vars = make(map[string]string, len(vars))
		}
		h.Vars[k] = v.val
	}
	return h, jump
}

// via finds the host a jump names: by name, else the one host whose
// ansible_host it is.
func (r *invReader) via(name string, jump invVar, vars map[string]map[string]invVar) string {
	target := jump.val
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
		if r.byAddress == nil {
			// The first two hosts with each ansible_host, in document order.
			r.byAddress = map[string][]string{}
			for _, other := range r.hostOrder {
				if a, ok := first(vars[other], varHost); ok {
					if at := strings.Trim(a.val, "[]"); len(r.byAddress[at]) < 2 {
						r.byAddress[at] = append(r.byAddress[at], other)
					}
				}
			}
		}
		switch hs := r.byAddress[target]; len(hs) {
		case 1:
			found = hs[0]
		case 2:
			r.fail(jump.path, jump.line, dag.CodeUnknownRef, "ProxyJump %s is the ansible_host of both %s and %s: jump by host name", jump.val, hs[0], hs[1])
			return ""
		}
	}
	switch found {
	case "":
		r.fail(jump.path, jump.line, dag.CodeUnknownRef, "ProxyJump %s is not a host of the inventory: gantry jumps only through hosts it knows; add it", jump.val)
	case name:
		r.fail(jump.path, jump.line, dag.CodeCycle, "host %s would jump through itself (ProxyJump %s): override the variable on that host", name, jump.val)
		return ""
	}
	return found
}

// viaCycles reports hosts that jump through each other in a ring, each
// ring once, from its host listed first. A host jumps through one host at
// most: from each host not yet met, it follows the jumps until a host met
// before; when that host was met on this walk, the walk closed a ring.
func (r *invReader) viaCycles(hosts map[string]dag.Host) {
	place := make(map[string]int, len(r.hostOrder)) // 1 + its place in the document
	for i, name := range r.hostOrder {
		place[name] = i + 1
	}
	met := make(map[string]int, len(r.hostOrder)) // the place of the host whose walk met it
	var rings [][]string
	var chain []string
	for i, name := range r.hostOrder {
		chain = chain[:0]
		cur := name
		for ; cur != "" && met[cur] == 0; cur = hosts[cur].Via {
			met[cur] = i + 1
			chain = append(chain, cur)
		}
		if cur == "" || met[cur] != i+1 {
			continue
		}
		ring := chain[slices.Index(chain, cur):]
		at := 0
		for j, h := range ring {
			if place[h] < place[ring[at]] {
				at = j
			}
		}
		rings = append(rings, append(slices.Clone(ring[at:]), ring[:at]...))
	}
	slices.SortFunc(rings, func(a, b []string) int { return cmp.Compare(place[a[0]], place[b[0]]) })
	for _, ring := range rings {
		h := r.hosts[ring[0]]
		r.fail(h.path, h.line, dag.CodeCycle, "hosts jump through each other: %s -> %s", strings.Join(ring, " -> "), ring[0])
	}
}
