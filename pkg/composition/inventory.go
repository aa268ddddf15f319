package composition

import (
	"errors"
	"fmt"
	"io"
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
		g = &invGroup{name: name, source: at, vars: map[string]invVar{}, childAt: map[string]source{}}
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

func (r *invReader) resolve() *Inventory {
	r.ordered()
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
	inv := &Inventory{Hosts: map[string]dag.Host{}, Groups: map[string]dag.Group{}}
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
		for k, v := range h.vars {
			v.rank = len(in)
			vars[k] = v
		}
		merged[name] = vars
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
	for r.depths() {
	}
}

// depths orders the groups from all down (Kahn's algorithm), giving each
// its depth. When groups are left over, they hold a cycle: depths reports
// one, cuts it, and returns true to be run again.
func (r *invReader) depths() bool {
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
				r.cutCycle(chain[at:])
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
func (r *invReader) cutCycle(up []string) {
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
	r.fail(link.path, link.line, dag.CodeCycle, "group %s is a child of itself: %s", child, strings.Join(names, " -> "))
	parent.children = slices.DeleteFunc(parent.children, func(c string) bool { return c == child })
	r.groups[child].parents = slices.DeleteFunc(r.groups[child].parents, func(p string) bool { return p == parent.name })
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
			h.Vars = map[string]string{}
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
		for _, other := range r.hostOrder {
			if a, ok := first(vars[other], varHost); ok && strings.Trim(a.val, "[]") == target {
				if found != "" {
					r.fail(jump.path, jump.line, dag.CodeUnknownRef, "ProxyJump %s is the ansible_host of both %s and %s: jump by host name", jump.val, found, other)
					return ""
				}
				found = other
			}
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

// viaCycles reports hosts that jump through each other in a ring.
func (r *invReader) viaCycles(hosts map[string]dag.Host) {
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
					r.fail(h.path, h.line, dag.CodeCycle, "hosts jump through each other: %s -> %s", strings.Join(chain, " -> "), name)
				}
				break
			}
			seen[cur] = true
			chain = append(chain, cur)
		}
	}
}
