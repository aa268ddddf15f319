package composition

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Inventories of public repositories (testdata/ansible/*, their sources in
// the README there), each with the `ansible-inventory -i INVENTORY --list`
// that ansible-core 2.14 wrote for it (expected.json): gantry's reading
// must have the same hosts, the same groups (with their hosts, children
// included) and, host by host, the same variables with the same types.
// Ansible is not needed to run it.

// ansibleCase is a case's case.json.
type ansibleCase struct {
	Source    string `json:"source"`
	Inventory string `json:"inventory"` // what -i was given, from the case's directory
	// Problems gantry reports by design (an option it refuses), each the
	// start of "file:line: path: message" with the file relative to the
	// case's directory; the hosts and variables are compared all the same.
	Problems []string `json:"problems"`
	// Warnings expected, each a part of one.
	Warnings []string `json:"warnings"`
	// Hosts are some hosts as gantry maps them, vars left out.
	Hosts map[string]json.RawMessage `json:"hosts"`
	// Ignored are ansible_* variables some hosts have that gantry does not
	// act on.
	Ignored map[string][]string `json:"ignored"`
}

// listOutput is what ansible-inventory --list writes.
type listOutput struct {
	hostvars map[string]map[string]any
	groups   map[string][]string // every host in the group or its children
	hosts    []string
}

func readListOutput(t *testing.T, path string) listOutput {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	type group struct {
		Hosts    []string `json:"hosts"`
		Children []string `json:"children"`
	}
	out := listOutput{hostvars: map[string]map[string]any{}, groups: map[string][]string{}}
	groups := map[string]group{}
	for k, v := range raw {
		if k == "_meta" {
			var meta struct {
				Hostvars map[string]map[string]any `json:"hostvars"`
			}
			d := json.NewDecoder(bytes.NewReader(v))
			d.UseNumber()
			if err := d.Decode(&meta); err != nil {
				t.Fatal(err)
			}
			out.hostvars = meta.Hostvars
			continue
		}
		var g group
		if err := json.Unmarshal(v, &g); err != nil {
			t.Fatal(err)
		}
		groups[k] = g
	}
	var members func(name string, seen map[string]bool) []string
	members = func(name string, seen map[string]bool) []string {
		if seen[name] {
			return nil
		}
		seen[name] = true
		g := groups[name]
		hosts := slices.Clone(g.Hosts)
		for _, c := range g.Children {
			hosts = append(hosts, members(c, seen)...)
		}
		return hosts
	}
	all := map[string]bool{}
	for name := range groups {
		hosts := members(name, map[string]bool{})
		slices.Sort(hosts)
		hosts = slices.Compact(hosts)
		for _, h := range hosts {
			all[h] = true
		}
		if name != "all" && name != "ungrouped" && len(hosts) > 0 {
			out.groups[name] = hosts
		}
	}
	for h := range all {
		out.hosts = append(out.hosts, h)
	}
	sort.Strings(out.hosts)
	return out
}

// sameValue compares a value of ansible-inventory's JSON with gantry's
// typed value: numbers by value, !unsafe text as text, a vault value as
// one.
func sameValue(want, got any) bool {
	if m, ok := want.(map[string]any); ok && len(m) == 1 {
		if u, ok := m["__ansible_unsafe"]; ok {
			want = u
		}
		if _, ok := m["__ansible_vault"]; ok {
			_, isVault := got.(Vault)
			return isVault
		}
	}
	switch w := want.(type) {
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return false
		}
		if w == g {
			return true
		}
		a, _, errA := big.ParseFloat(string(w), 10, 200, big.ToNearestEven)
		b, _, errB := big.ParseFloat(string(g), 10, 200, big.ToNearestEven)
		return errA == nil && errB == nil && a.Cmp(b) == 0
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !sameValue(w[i], g[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k := range w {
			if !sameValue(w[k], g[k]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(want, got)
}

// comparison is one row of the table TestAnsibleInventories logs.
type comparison struct {
	name                          string
	hosts, hostsMatched           int
	groups, groupsMatched         int
	vars, varsMatched             int
	differences                   []string
	problems, warnings, ignoredNo int
}

func compareWithAnsible(t *testing.T, dir string, c ansibleCase) comparison {
	want := readListOutput(t, filepath.Join(dir, "expected.json"))
	path := filepath.Join(dir, c.Inventory)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	r := newInvReader()
	r.readTop(path, fi.IsDir())
	inv := r.finish()
	cmp := comparison{name: filepath.Base(dir), hosts: len(want.hosts), groups: len(want.groups)}
	diff := func(format string, args ...any) {
		cmp.differences = append(cmp.differences, fmt.Sprintf(format, args...))
	}
	var got []string
	for h := range inv.Hosts {
		got = append(got, h)
	}
	sort.Strings(got)
	for _, h := range want.hosts {
		if _, ok := inv.Hosts[h]; ok {
			cmp.hostsMatched++
		} else {
			diff("host %s missing", h)
		}
	}
	for _, h := range got {
		if !slices.Contains(want.hosts, h) {
			diff("host %s extra", h)
		}
	}
	for g, hosts := range want.groups {
		if reflect.DeepEqual(inv.Groups[g].Hosts, hosts) {
			cmp.groupsMatched++
		} else {
			diff("group %s: %v, want %v", g, inv.Groups[g].Hosts, hosts)
		}
	}
	for g := range inv.Groups {
		if _, ok := want.groups[g]; !ok {
			diff("group %s extra", g)
		}
	}
	for _, h := range want.hosts {
		wv, gv := want.hostvars[h], inv.Vars[h]
		for k, w := range wv {
			cmp.vars++
			g, ok := gv[k]
			switch {
			case !ok:
				diff("%s: %s missing (want %s)", h, k, jsonText(w))
			case !sameValue(w, g):
				diff("%s: %s = %s, want %s", h, k, jsonText(g), jsonText(w))
			default:
				cmp.varsMatched++
			}
		}
		for k, g := range gv {
			if _, ok := wv[k]; !ok {
				diff("%s: %s = %s extra", h, k, jsonText(g))
			}
		}
	}
	cmp.problems, cmp.warnings = len(r.sorted()), len(inv.Warnings)
	checkProblems(t, dir, r.sorted(), c.Problems)
	checkWarnings(t, dir, inv.Warnings, c.Warnings)
	checkHosts(t, inv, c)
	return cmp
}

func checkProblems(t *testing.T, dir string, ps []dag.Problem, want []string) {
	t.Helper()
	var got []string
	for _, p := range ps {
		file, _ := filepath.Rel(dir, p.File)
		got = append(got, fmt.Sprintf("%s:%d: %s: %s", file, p.Line, p.Path, p.Message))
	}
	if len(got) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("no problem %q in\n%s", w, strings.Join(got, "\n"))
		}
	}
}

func checkWarnings(t *testing.T, dir string, ws []dag.Problem, want []string) {
	t.Helper()
	var got []string
	for _, p := range ws {
		file, _ := filepath.Rel(dir, p.File)
		got = append(got, fmt.Sprintf("%s:%d: %s: %s", file, p.Line, p.Path, p.Message))
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
			t.Errorf("no warning %q in\n%s", w, strings.Join(got, "\n"))
		}
	}
}

func checkHosts(t *testing.T, inv *Inventory, c ansibleCase) {
	t.Helper()
	for name, raw := range c.Hosts {
		var want dag.Host
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		got := inv.Hosts[name]
		got.Vars, got.TypedVars = nil, nil // the vars are compared above
		if !reflect.DeepEqual(got, want) {
			t.Errorf("host %s: %s, want %s", name, jsonText(got), jsonText(want))
		}
	}
	for name, want := range c.Ignored {
		if got := inv.Ignored[name]; !reflect.DeepEqual(got, want) {
			t.Errorf("host %s ignores %v, want %v", name, got, want)
		}
	}
}

func TestAnsibleInventories(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/ansible/*/case.json")
	if len(dirs) < 10 {
		t.Fatalf("%d cases", len(dirs))
	}
	var rows []comparison
	for _, f := range dirs {
		dir := filepath.Dir(f)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var c ansibleCase
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &c); err != nil {
				t.Fatal(err)
			}
			cmp := compareWithAnsible(t, dir, c)
			rows = append(rows, cmp)
			for _, d := range cmp.differences {
				t.Errorf("differs from Ansible: %s", d)
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| inventory | hosts matched | groups matched | vars matched | differences | gantry problems | warnings |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d/%d | %d/%d | %d/%d | %d | %d | %d |\n", r.name, r.hostsMatched, r.hosts, r.groupsMatched, r.groups, r.varsMatched, r.vars, len(r.differences), r.problems, r.warnings)
	}
	t.Log(b.String())
}
