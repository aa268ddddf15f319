package composition

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Inventory is what an Ansible inventory holds, in gantry's terms: the
// hosts and groups a composition's `inventory:` stands in for, and each
// host's variables as Ansible types them.
type Inventory struct {
	// Hosts are the hosts as a composition writes them: their connection
	// (address, user, transport, via, become, identity_file) and, as vars,
	// their variables but those gantry acts on or leaves out (ansible_*
	// ones, literal secrets, ansible-vault values), as text.
	Hosts  map[string]dag.Host  `json:"hosts"`
	Groups map[string]dag.Group `json:"groups"`
	// Vars holds each host's variables merged as Ansible merges them and
	// typed as Ansible types them (see typed values in inventory_value.go),
	// secrets included: print them through Shown, which masks secrets.
	Vars map[string]map[string]any `json:"-"`
	// Ignored lists, per host, the ansible_* variables it has that gantry
	// does not act on, sorted.
	Ignored map[string][]string `json:"-"`
	// Warnings are what gantry reads but does not take as written: a
	// secret held in the inventory, an ansible-vault value, a key given
	// twice. Each has its file and line.
	Warnings []dag.Problem `json:"-"`
}

// ReadInventoryFile reads an Ansible inventory as `ansible-inventory -i
// PATH` does: an INI, YAML or `ansible-inventory --list` JSON file (told
// apart by what it holds, not its name), or a directory of such files,
// with the group_vars/ and host_vars/ beside it (in the directory itself,
// or the file's). Each file is read up to dag.DefaultMaxBytes.
func ReadInventoryFile(path string) (*Inventory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	r := newInvReader()
	r.readTop(path, fi.IsDir())
	inv := r.finish()
	if len(r.problems) > 0 {
		return nil, withFile(invalid(r.sorted()...), path)
	}
	return inv, nil
}

// ReadInventory reads one inventory document (INI, YAML or `--list` JSON)
// named name, without group_vars or host_vars. Every problem comes back
// at once as a *dag.InvalidError whose problems carry name as their File,
// a path (all.children.web.hosts.web-1.ports in YAML, "[web] web-1" in
// INI) and the line.
func ReadInventory(name string, data []byte) (*Inventory, error) {
	r := newInvReader()
	r.readSource(name, data)
	inv := r.finish()
	if len(r.problems) > 0 {
		return nil, withFile(invalid(r.sorted()...), name)
	}
	return inv, nil
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

// sorted returns the problems in source order (file, then line), each
// once (a group's bad variable is found again for each of its hosts).
func (r *invReader) sorted() []dag.Problem { return sortProblems(r.problems) }

func sortProblems(ps []dag.Problem) []dag.Problem {
	seen := map[dag.Problem]bool{}
	var out []dag.Problem
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Line < out[j].Line
	})
	return out
}

// withFile sets File on every problem of an *dag.InvalidError that has
// none (one about the whole inventory).
func withFile(err error, file string) error {
	var inv *dag.InvalidError
	if !errors.As(err, &inv) {
		return err
	}
	for i := range inv.Problems {
		if inv.Problems[i].File == "" {
			inv.Problems[i].File = file
		}
	}
	return inv
}

// source is where a value was written: a file, a path in it (a YAML key
// path, or an INI section and name) and a line.
type source struct {
	file string
	path string
	line int
}

type invVar struct {
	val any // a typed value (inventory_value.go)
	source
	rank int // in a host's merged vars: higher was merged later, and wins
}

type invGroup struct {
	name     string
	source                     // first definition
	vars     map[string]invVar // in the inventory, merged in document order
	fileVars map[string]invVar // from group_vars/
	hosts    []string          // listed in it directly
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
	vars     map[string]invVar // in the inventory, merged in document order
	fileVars map[string]invVar // from host_vars/
	groups   []string          // listed directly in
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
	warnings   []dag.Problem
	steps      int                 // of resolving the groups
	tooLarge   bool                // steps are over maxResolveSteps
	byAddress  map[string][]string // ansible_host: the first two hosts with it
	cur        string              // the file being read
	vault      map[*dag.Value]bool // values tagged !vault in the YAML being read
	files      int                 // files read
	bytes      int                 // bytes read from them
}

func newInvReader() *invReader {
	r := &invReader{groups: map[string]*invGroup{}, hosts: map[string]*invHost{}, listed: map[[2]string]bool{}}
	r.group("all", source{path: "all"})
	r.group("ungrouped", source{path: "ungrouped"})
	r.addChild(r.groups["all"], "ungrouped", source{})
	return r
}

// at is a place in the file being read.
func (r *invReader) at(path string, line int) source { return source{r.cur, path, line} }

func (r *invReader) fail(at source, code dag.Code, format string, args ...any) {
	r.problems = append(r.problems, dag.Problem{File: at.file, Path: at.path, Line: at.line, Code: code, Message: fmt.Sprintf(format, args...)})
}

func (r *invReader) warn(at source, format string, args ...any) {
	r.warnings = append(r.warnings, dag.Problem{File: at.file, Path: at.path, Line: at.line, Code: dag.CodeValue, Message: fmt.Sprintf(format, args...)})
}

// group returns the group name, made at at when it is new.
func (r *invReader) group(name string, at source) *invGroup {
	g := r.groups[name]
	if g == nil {
		g = &invGroup{name: name, idx: int32(len(r.groupOrder)), source: at, priority: 1, vars: map[string]invVar{}, fileVars: map[string]invVar{}, childAt: map[string]source{}}
		r.groups[name] = g
		r.groupOrder = append(r.groupOrder, name)
	}
	return g
}

// addChild makes child (a group, made when new) a child of parent, once.
func (r *invReader) addChild(parent *invGroup, child string, at source) *invGroup {
	g := r.group(child, at)
	if _, dup := parent.childAt[child]; !dup {
		parent.children = append(parent.children, child)
		parent.childAt[child] = at
		g.parents = append(g.parents, parent.name)
	}
	return g
}

// maxHosts bounds the hosts an inventory may make, ranges expanded.
const maxHosts = 100000

// addHosts lists the hosts a pattern made in g, making those that are
// new; a port in the pattern is the ansible_port of the hosts it makes,
// as in Ansible. It returns the hosts, or nil past maxHosts.
func (r *invReader) addHosts(g *invGroup, names []string, port any, at source) []*invHost {
	if r.stopped {
		return nil
	}
	if r.expanded += len(names); r.expanded > maxHosts {
		r.fail(at, dag.CodeTooLarge, "more than %d hosts in the inventory", maxHosts)
		r.stopped = true
		return nil
	}
	out := make([]*invHost, 0, len(names))
	for _, name := range names {
		h := r.hosts[name]
		if h == nil {
			h = &invHost{name: name, source: at, vars: map[string]invVar{}, fileVars: map[string]invVar{}}
			r.hosts[name] = h
			r.hostOrder = append(r.hostOrder, name)
			if port != nil {
				h.vars["ansible_port"] = invVar{val: port, source: at}
			}
		}
		if !r.listed[[2]string{name, g.name}] {
			r.listed[[2]string{name, g.name}] = true
			h.groups = append(h.groups, g.name)
			g.hosts = append(g.hosts, name)
		}
		out = append(out, h)
	}
	return out
}

// reconcile does what Ansible does once every source is read: a group
// that is no other group's child is all's, a host listed in no group
// but all is ungrouped's, and one listed in another group is not.
func (r *invReader) reconcile() {
	all, ungrouped := r.groups["all"], r.groups["ungrouped"]
	for _, name := range r.groupOrder {
		if g := r.groups[name]; g != all && len(g.parents) == 0 {
			r.addChild(all, name, g.source)
		}
	}
	var kept []string
	for _, name := range r.hostOrder {
		h := r.hosts[name]
		other := false
		for _, g := range h.groups {
			other = other || g != "all" && g != "ungrouped"
		}
		in := r.listed[[2]string{name, "ungrouped"}]
		switch {
		case in && other:
			delete(r.listed, [2]string{name, "ungrouped"})
			h.groups = removeString(h.groups, "ungrouped")
		case !other:
			if !in {
				r.listed[[2]string{name, "ungrouped"}] = true
				h.groups = append(h.groups, "ungrouped")
			}
			kept = append(kept, name)
		}
	}
	ungrouped.hosts = kept
}

func removeString(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// finish reconciles what was read and resolves it.
func (r *invReader) finish() *Inventory {
	r.reconcile()
	inv := r.resolve()
	inv.Warnings = sortProblems(r.warnings)
	return inv
}
