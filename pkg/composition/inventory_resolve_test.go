package composition

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// denseName names group i of a dense inventory in two characters, so that
// 700 groups, each a child of all before it, fit in 1 MiB.
func denseName(i int) string {
	const c = "abcdefghijklmnopqrstuvwxyz0123456789"
	return string([]byte{c[i/len(c)%len(c)], c[i%len(c)]})
}

// denseInventory writes an inventory of n groups, each a child of all the
// groups before it (group j lists every later group among its children),
// each with 3 hosts (one with a variable of its own), a variable v every
// group sets (the deepest group's wins) and one of 7 others.
func denseInventory(n int) []byte {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s:\n  vars: {v: %d, w%d: g%d}\n  hosts: {h%d-a: , h%d-b: , h%d-c: {own: y}}\n", denseName(i), i, i%7, i, i, i, i)
		if i < n-1 {
			b.WriteString("  children: {")
			for j := i + 1; j < n; j++ {
				if j > i+1 {
					b.WriteByte(',')
				}
				b.WriteString(denseName(j))
			}
			b.WriteString("}\n")
		}
	}
	return []byte(b.String())
}

// readFor reads an inventory up to resolving it.
func readFor(t testing.TB, doc []byte) *invReader {
	t.Helper()
	r := readerOf("inventory.yaml", doc)
	if len(r.problems) > 0 && r.problems[0].Code == dag.CodeSyntax {
		t.Fatalf("parse: %s", lines(r.problems))
	}
	return r
}

// readerOf reads an inventory document up to resolving it.
func readerOf(name string, doc []byte) *invReader {
	r := newInvReader()
	r.readSource(name, doc)
	r.reconcile()
	return r
}

// sameAsReference resolves doc with resolve and with refResolve (the
// algorithm gantry had before), and fails unless both make the same hosts,
// groups and problems. It returns the reader resolve used.
func sameAsReference(t *testing.T, doc []byte) *invReader {
	t.Helper()
	r, ref := readFor(t, doc), readFor(t, doc)
	got, want := r.resolve(), ref.refResolve()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s\nresolve:\n%s\nthe reference:\n%s", doc, js(got), js(want))
	}
	if gp, wp := r.sorted(), ref.sorted(); !reflect.DeepEqual(gp, wp) && (len(gp) > 0 || len(wp) > 0) {
		t.Fatalf("%s\nresolve's problems:\n%s\nthe reference's:\n%s", doc, lines(gp), lines(wp))
	}
	return r
}

func js(v any) string { b, _ := json.MarshalIndent(v, "", " "); return string(b) }

func lines(ps []dag.Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%d: %s: %s: %s\n", p.Line, p.Path, p.Code, p.Message)
	}
	return b.String()
}

func TestInventoryDenseIsTheReference(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10, 40} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { sameAsReference(t, denseInventory(n)) })
	}
}

// TestInventoryDense resolves 700 groups, each a child of all before it:
// each host is in its group and every group before it, with its own
// group's v, and each group has the hosts of the groups after it, and it takes about as many steps as there are hosts in
// groups and links between groups, not their product (the reference took
// over a minute of CPU).
func TestInventoryDense(t *testing.T) {
	const n = 700
	doc := denseInventory(n)
	if len(doc) > dag.DefaultMaxBytes {
		t.Fatalf("%d bytes", len(doc))
	}
	r := readFor(t, doc)
	inv := r.resolve()
	if len(r.problems) > 0 {
		t.Fatal(lines(r.sorted()))
	}
	if len(inv.Hosts) != 3*n || len(inv.Groups) != n {
		t.Fatalf("%d hosts, %d groups", len(inv.Hosts), len(inv.Groups))
	}
	for i := range n {
		g := inv.Groups[denseName(i)].Hosts
		if len(g) != 3*(n-i) {
			t.Fatalf("group %d: %d hosts", i, len(g))
		}
		for _, x := range []string{"a", "b", "c"} {
			h := inv.Hosts[fmt.Sprintf("h%d-%s", i, x)]
			want := map[string]string{"v": fmt.Sprint(i)}
			for j := range min(i+1, 7) {
				// w(j%7) is set by the groups j, j+7, ...: the last of them at or above i wins.
				k := j + (i-j)/7*7
				want[fmt.Sprintf("w%d", k%7)] = fmt.Sprintf("g%d", k)
			}
			if x == "c" {
				want["own"] = "y"
			}
			if !reflect.DeepEqual(h.Vars, want) {
				t.Fatalf("host h%d-%s: %v, want %v", i, x, h.Vars, want)
			}
		}
	}
	links, memberships := n*(n-1)/2, 0
	for _, g := range inv.Groups {
		memberships += len(g.Hosts)
	}
	t.Logf("%d links, %d hosts in groups: %d steps", links, memberships, r.steps)
	if r.steps > 4*(links+memberships) {
		t.Errorf("%d steps for %d links and %d hosts in groups", r.steps, links, memberships)
	}
}

func BenchmarkInventoryDense(b *testing.B) {
	doc := denseInventory(700)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if _, err := ReadInventory("dense.yaml", doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInventoryDenseResolve is BenchmarkInventoryDense without
// parsing the YAML.
func BenchmarkInventoryDenseResolve(b *testing.B) {
	doc := denseInventory(700)
	root, _, _, err := parseInventoryYAML(doc)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		r := newInvReader()
		r.readYAML(root)
		r.reconcile()
		r.resolve()
		if len(r.problems) > 0 {
			b.Fatal(lines(r.problems))
		}
	}
}

// randomInventory writes a small inventory of a few groups and hosts,
// listed at random: groups at the top and nested, children that make
// cycles, hosts in several groups, the connection variables, priorities,
// jumps by name and by address, on lines of their own or several on one.
func randomInventory(rng *rand.Rand) []byte {
	groups := []string{"all", "ungrouped", "a", "b", "c", "d", "e", "f", "g"}[:3+rng.IntN(7)]
	hosts := []string{"h1", "h2", "h3", "h4", "h5", "h6"}[:1+rng.IntN(6)]
	pick := func(names []string) string { return names[rng.IntN(len(names))] }
	vars := func() string {
		var kv []string
		for range rng.IntN(4) {
			switch rng.IntN(10) {
			case 0:
				kv = append(kv, "ansible_group_priority: "+pick([]string{"1", "2", "-1", "x"}))
			case 1:
				kv = append(kv, "ansible_host: 10.0.0."+pick([]string{"1", "2", "3"}))
			case 2:
				kv = append(kv, "ansible_ssh_host: 10.0.0."+pick([]string{"1", "2", "3"}))
			case 3:
				kv = append(kv, "ansible_ssh_common_args: "+pick([]string{`"-J h1"`, `"-J h2"`, `"-o ProxyJump=10.0.0.1"`, `"-J 10.0.0.2"`, `""`, `"-J nowhere"`}))
			case 4:
				kv = append(kv, "ansible_port: "+pick([]string{"22", "2222", "99999"}))
			case 5:
				kv = append(kv, "ansible_connection: "+pick([]string{"local", "ssh", "docker"}))
			case 6:
				kv = append(kv, "ansible_password: x")
			default:
				kv = append(kv, pick([]string{"x", "y", "z"})+": "+pick([]string{"1", "2", "3"}))
			}
		}
		seen := map[string]bool{}
		kv = slices.DeleteFunc(kv, func(s string) bool {
			k, _, _ := strings.Cut(s, ":")
			dup := seen[k]
			seen[k] = true
			return dup
		})
		return "{" + strings.Join(kv, ", ") + "}"
	}
	var b strings.Builder
	var group func(name, indent string, depth int)
	group = func(name, indent string, depth int) {
		if rng.IntN(4) == 0 {
			b.WriteString(indent + name + ":\n")
			return
		}
		if rng.IntN(3) == 0 { // all on one line
			var parts []string
			if rng.IntN(2) == 0 {
				parts = append(parts, "vars: "+vars())
			}
			if rng.IntN(2) == 0 {
				parts = append(parts, "hosts: {"+pick(hosts)+": "+vars()+"}")
			}
			if rng.IntN(2) == 0 {
				c, d := pick(groups), pick(groups)
				if c == d {
					parts = append(parts, "children: {"+c+": }")
				} else {
					parts = append(parts, "children: {"+c+": , "+d+": }")
				}
			}
			b.WriteString(indent + name + ": {" + strings.Join(parts, ", ") + "}\n")
			return
		}
		b.WriteString(indent + name + ":\n")
		in := indent + "  "
		if rng.IntN(2) == 0 {
			b.WriteString(in + "vars: " + vars() + "\n")
		}
		if rng.IntN(3) > 0 {
			b.WriteString(in + "hosts:\n")
			seen := map[string]bool{}
			for range 1 + rng.IntN(3) {
				if h := pick(hosts); !seen[h] {
					seen[h] = true
					b.WriteString(in + "  " + h + ": " + vars() + "\n")
				}
			}
		}
		if depth < 3 && rng.IntN(2) == 0 {
			b.WriteString(in + "children:\n")
			seen := map[string]bool{}
			for range 1 + rng.IntN(3) {
				if c := pick(groups); !seen[c] {
					seen[c] = true
					group(c, in+"  ", depth+1)
				}
			}
		}
	}
	seen := map[string]bool{}
	for range 1 + rng.IntN(5) {
		if g := pick(groups); !seen[g] {
			seen[g] = true
			group(g, "", 0)
		}
	}
	return []byte(b.String())
}

// randomGraph writes up to 30 groups, each defined at the top with
// children picked at random (so with cycles of every length, often more
// than one through a group), a host or two and a variable.
func randomGraph(rng *rand.Rand) []byte {
	n := 1 + rng.IntN(30)
	links := rng.IntN(3 * n)
	children := make([]map[int]bool, n)
	for i := range children {
		children[i] = map[int]bool{}
	}
	for range links {
		children[rng.IntN(n)][rng.IntN(n)] = true
	}
	var b strings.Builder
	for _, i := range rng.Perm(n) {
		h := rng.IntN(2 * n)
		fmt.Fprintf(&b, "g%d:\n  vars: {v: %d, w%d: %d, ansible_group_priority: %d}\n  hosts: {h%d: , h%d: }\n", i, i, i%3, i, rng.IntN(3), h, h+1+rng.IntN(n))
		if len(children[i]) > 0 {
			b.WriteString("  children:")
			oneLine := rng.IntN(2) == 0
			if oneLine {
				b.WriteString(" {")
			} else {
				b.WriteString("\n")
			}
			for _, c := range rng.Perm(n) {
				if !children[i][c] {
					continue
				}
				if oneLine {
					fmt.Fprintf(&b, "g%d: , ", c)
				} else {
					fmt.Fprintf(&b, "    g%d:\n", c)
				}
			}
			if oneLine {
				b.WriteString("}\n")
			}
		}
	}
	return []byte(b.String())
}

// TestInventoryIsTheReference: on random inventories, with cycles, jumps
// and problems, resolve makes what the reference does.
func TestInventoryIsTheReference(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 500
	}
	rng := rand.New(rand.NewPCG(1, 2))
	cycles, several, hosts := 0, 0, 0
	for i := range n {
		doc := randomInventory(rng)
		if i%2 == 1 {
			doc = randomGraph(rng)
		}
		if _, err := Parse("inventory.yaml", doc); err != nil {
			t.Fatalf("%s\n%v", doc, err)
		}
		r := sameAsReference(t, doc)
		c := 0
		for _, p := range r.problems {
			if p.Code == dag.CodeCycle && strings.HasPrefix(p.Message, "group") {
				c++
			}
		}
		cycles += min(c, 1)
		several += min(c/5, 1)
		if len(r.problems) == 0 && len(r.hosts) > 0 {
			hosts++
		}
	}
	t.Logf("%d inventories: %d with cycles of groups (%d with 5 or more), %d valid with hosts", n, cycles, several, hosts)
	if cycles < n/10 || several < n/20 || hosts < n/10 {
		t.Errorf("the inventories are not varied enough")
	}
}

// FuzzInventoryReference: any bytes resolve as the reference resolves
// them, but those the reference would take too long on (many groups or
// hosts) and those resolve refuses for a limit the reference has not
// (maxResolveSteps, maxGroupCycles).
func FuzzInventoryReference(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10 {
		f.Add(randomInventory(rng))
		f.Add(randomGraph(rng))
	}
	f.Add(denseInventory(5))
	f.Fuzz(func(t *testing.T, doc []byte) {
		r, ref := readerOf("f.yaml", doc), readerOf("f.yaml", doc)
		if len(r.groupOrder) > 200 || r.expanded > 2000 {
			return // the reference would take too long
		}
		got := r.resolve()
		if r.tooLarge || slices.ContainsFunc(r.problems, func(p dag.Problem) bool { return strings.Contains(p.Message, "cycles of groups") }) {
			return // bounded, unlike the reference
		}
		want := ref.refResolve()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("resolve:\n%s\nthe reference:\n%s", js(got), js(want))
		}
		if gp, wp := r.sorted(), ref.sorted(); !reflect.DeepEqual(gp, wp) && (len(gp) > 0 || len(wp) > 0) {
			t.Fatalf("resolve's problems:\n%s\nthe reference's:\n%s", lines(gp), lines(wp))
		}
	})
}

// TestInventoryTooLarge: what the groups come to is bounded: a chain of
// 8,000 groups, each with a host (32,000,000 hosts in groups), is refused
// with the limit named (and 100,000 hosts with 29 variables each are
// not); past maxGroupCycles cycles of groups, one problem says there are
// more, while the rest of the inventory is still checked.
func TestInventoryTooLarge(t *testing.T) {
	t.Run("steps", func(t *testing.T) {
		var b strings.Builder
		for i := range 8000 {
			fmt.Fprintf(&b, "g%d: {hosts: {h%d: }, children: {g%d: }}\n", i, i, i+1)
		}
		_, err := ReadInventory("inventory.yaml", []byte(b.String()))
		var bad *dag.InvalidError
		if !errors.As(err, &bad) || len(bad.Problems) != 1 || bad.Problems[0].Code != dag.CodeTooLarge ||
			!strings.Contains(bad.Problems[0].Message, fmt.Sprintf("more than %d steps", maxResolveSteps)) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("a range of 100,000 hosts with 29 variables each fits", func(t *testing.T) {
		if testing.Short() {
			t.Skip("about a second and 350 MB")
		}
		var b strings.Builder
		b.WriteString("web:\n  hosts: {\"h[0:99999]\": }\n  vars: {")
		for i := range 29 {
			fmt.Fprintf(&b, "v%d: %d, ", i, i)
		}
		b.WriteString("}\n")
		inv, err := ReadInventory("inventory.yaml", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		if len(inv.Hosts) != 100000 || len(inv.Hosts["h99999"].Vars) != 29 {
			t.Errorf("%d hosts, %v", len(inv.Hosts), inv.Hosts["h99999"])
		}
	})
	t.Run("cycles", func(t *testing.T) {
		// 300 groups, each a child of every other: 44,850 cycles of two.
		var b strings.Builder
		b.WriteString("all:\n  vars: {ansible_become_method: su}\n  hosts: {h: }\n")
		for i := range 300 {
			fmt.Fprintf(&b, "%s:\n  hosts: {h%d: }\n  children: {", denseName(i), i)
			for j := range 300 {
				if j != i {
					b.WriteString(denseName(j) + ",")
				}
			}
			b.WriteString("}\n")
		}
		_, err := ReadInventory("inventory.yaml", []byte(b.String()))
		var bad *dag.InvalidError
		if !errors.As(err, &bad) {
			t.Fatal(err)
		}
		cycles, tooMany, become := 0, 0, 0
		for _, p := range bad.Problems {
			switch {
			case p.Code == dag.CodeCycle:
				cycles++
			case p.Code == dag.CodeTooLarge && p.Message == "more than 100 cycles of groups: the rest are not reported":
				tooMany++
			case strings.HasPrefix(p.Message, "ansible_become_method"):
				become++
			}
		}
		if cycles != maxGroupCycles || tooMany != 1 || become != 1 || len(bad.Problems) != maxGroupCycles+2 {
			t.Errorf("%d cycles, %d over the limit, %d become methods:\n%s", cycles, tooMany, become, lines(bad.Problems))
		}
	})
}
