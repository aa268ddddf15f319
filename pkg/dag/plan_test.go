package dag_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

const k8s = `{"name":"k","hosts":{"cp":{"transport":"local"},"w0":{"transport":"local"},"w1":{"transport":"local"}},"formulas":[
 {"id":"cp-os","server":"cp","nodes":[{"name":"os","run":"x","delete":"d"}]},
 {"id":"cp-kube","server":"cp","depends_on":["cp-os"],"nodes":[{"name":"packages","run":"x","delete":"d"},{"name":"init","run":"x","delete":"d"}],
  "health_gate":{"check":"ready","timeout":"10s","retries":3}},
 {"id":"w0-os","server":"w0","nodes":[{"name":"os","run":"x","delete":"d"}]},
 {"id":"w0-kube","server":"w0","depends_on":["w0-os","cp-kube"],"nodes":[{"name":"packages","run":"x","delete":"d"},{"name":"join","run":"x","delete":"d"}]},
 {"id":"w1-os","server":"w1","nodes":[{"name":"os","run":"x","delete":"d"}]},
 {"id":"w1-kube","server":"w1","depends_on":["w1-os","cp-kube"],"nodes":[{"name":"packages","run":"x","delete":"d"},{"name":"join","run":"x","delete":"d"}]},
 {"id":"cni","server":"cp","depends_on":[{"formula":"w0-kube","condition":"completed"},{"formula":"w1-kube"}],"nodes":[{"name":"flannel","run":"x","delete":"d"}]}
]}`

func mustPlan(t testing.TB, doc string) *dag.Plan {
	t.Helper()
	c, err := dag.ParseJSONComposition([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return dag.PlanLoaded(c)
}

func withField(doc, field string) string { return `{` + field + `,` + doc[1:] }

func TestPlanLevels(t *testing.T) {
	p := mustPlan(t, k8s)
	want := [][]string{{"cp-os", "w0-os", "w1-os"}, {"cp-kube"}, {"w0-kube", "w1-kube"}, {"cni"}}
	if !reflect.DeepEqual(p.LevelIDs, want) {
		t.Fatalf("levels = %v, want %v", p.LevelIDs, want)
	}
	assertRespectsDeps(t, p)
	i, _ := p.Index("w0-kube")
	if got := p.Formulas[i].DependsOn; got[1].Formula != "cp-kube" || got[1].Condition != dag.ConditionHealthy {
		t.Errorf("w0-kube deps = %+v", got)
	}
	if p.Formulas[i].Gate != nil {
		t.Errorf("w0-kube has no gate")
	}
	if j, _ := p.Index("cp-kube"); p.Formulas[j].Gate == nil {
		t.Errorf("cp-kube gate missing")
	}
}

// assertRespectsDeps checks that Order and Levels put every prerequisite first.
func assertRespectsDeps(t testing.TB, p *dag.Plan) {
	t.Helper()
	pos := make([]int, len(p.Formulas))
	for k, i := range p.Order {
		pos[i] = k
	}
	if len(p.Order) != len(p.Formulas) {
		t.Fatalf("order has %d of %d formulas", len(p.Order), len(p.Formulas))
	}
	for i, f := range p.Formulas {
		for _, d := range f.Deps {
			if pos[d.Formula] >= pos[i] || p.Formulas[d.Formula].Level >= f.Level {
				t.Fatalf("%s runs before its prerequisite %s", f.ID, p.Formulas[d.Formula].ID)
			}
		}
		npos := make([]int, len(f.Nodes))
		for k, j := range f.NodeOrder {
			npos[j] = k
		}
		for j, n := range f.Nodes {
			for _, k := range n.Deps {
				if npos[k] >= npos[j] || f.Nodes[k].Level >= n.Level {
					t.Fatalf("%s/%s runs before %s", f.ID, n.Name, f.Nodes[k].Name)
				}
			}
		}
	}
}

func TestNodeOrder(t *testing.T) {
	p := mustPlan(t, base(`{"id":"a","server":"h1","max_parallel":2,"nodes":[
		{"name":"final","run":"x","depends_on":["x","y"]},{"name":"x","run":"x","depends_on":["setup"]},
		{"name":"y","run":"x","depends_on":["setup"]},{"name":"setup","run":"x"}]}`))
	f := p.Formulas[0]
	if want := []string{"setup", "x", "y", "final"}; !reflect.DeepEqual(f.Order, want) {
		t.Fatalf("order = %v, want %v", f.Order, want)
	}
	// max_parallel 1 without depends_on: listed order, each after the previous.
	p = mustPlan(t, base(`{"id":"a","server":"h1","nodes":[{"name":"c","run":"x"},{"name":"a","run":"x"},{"name":"b","run":"x"}]}`))
	if want := []string{"c", "a", "b"}; !reflect.DeepEqual(p.Formulas[0].Order, want) {
		t.Fatalf("order = %v, want %v", p.Formulas[0].Order, want)
	}
}

func TestTargets(t *testing.T) {
	cases := []struct {
		targets string
		want    []string
	}{
		{`["join"]`, []string{"cp-os", "cp-kube", "w0-os", "w0-kube", "w1-os", "w1-kube"}},
		{`["cp-kube"]`, []string{"cp-os", "cp-kube"}},
		{`["flannel"]`, []string{"cp-os", "cp-kube", "w0-os", "w0-kube", "w1-os", "w1-kube", "cni"}},
		{`["init"]`, []string{"cp-os", "cp-kube"}},
	}
	for _, tc := range cases {
		p := mustPlan(t, withField(k8s, `"targets":`+tc.targets))
		var got []string
		for _, f := range p.Formulas {
			got = append(got, f.ID)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("targets %s selected %v, want %v", tc.targets, got, tc.want)
		}
		assertRespectsDeps(t, p)
	}
	p := mustPlan(t, withField(k8s, `"targets":["init"]`))
	if !slices.Equal(p.NotSelected, []string{"w0-os", "w0-kube", "w1-os", "w1-kube", "cni"}) {
		t.Errorf("not selected = %v", p.NotSelected)
	}
	if i, _ := p.Index("cp-kube"); !p.Formulas[i].Target {
		t.Errorf("cp-kube not marked as target")
	}
	if i, _ := p.Index("cp-os"); p.Formulas[i].Target {
		t.Errorf("cp-os marked as target")
	}
}

func TestDeleteReversesOrder(t *testing.T) {
	p := mustPlan(t, withField(k8s, `"operation":"delete"`))
	want := [][]string{{"cni"}, {"w0-kube", "w1-kube"}, {"cp-kube", "w0-os", "w1-os"}, {"cp-os"}}
	if !reflect.DeepEqual(p.LevelIDs, want) {
		t.Fatalf("delete levels = %v, want %v", p.LevelIDs, want)
	}
	assertRespectsDeps(t, p)
	i, _ := p.Index("cp-kube")
	f := p.Formulas[i]
	if !reflect.DeepEqual(f.Order, []string{"init", "packages"}) || f.Nodes[0].Command != "d" {
		t.Errorf("cp-kube delete order = %v command %q", f.Order, f.Nodes[0].Command)
	}
	if f.Gate != nil {
		t.Errorf("delete runs no health gates")
	}
	// delete with a target takes what is built on it, not its prerequisites.
	p = mustPlan(t, withField(k8s, `"operation":"delete","targets":["cp-kube"]`))
	var got []string
	for _, f := range p.Formulas {
		got = append(got, f.ID)
	}
	if want := []string{"cp-kube", "w0-kube", "w1-kube", "cni"}; !reflect.DeepEqual(got, want) {
		t.Errorf("delete target selected %v, want %v", got, want)
	}
}

func TestCheckOperationHasNoGates(t *testing.T) {
	p := mustPlan(t, withField(k8s, `"operation":"check"`))
	for _, f := range p.Formulas {
		if f.Gate != nil {
			t.Errorf("%s has a gate under check", f.ID)
		}
		for _, d := range f.Deps {
			if d.Condition != dag.ConditionCompleted {
				t.Errorf("%s waits for %s under check", f.ID, d.Condition)
			}
		}
	}
}

func TestSpecHash(t *testing.T) {
	n := dag.Node{Name: "n", Run: "apt-get install x", Check: "command -v x", Delete: "apt-get remove x",
		Timeout: dag.Duration(600e9), Env: map[string]dag.EnvValue{"A": dag.Text("1"), "B": dag.Text("2")}}
	h := dag.SpecHash(&n)
	// Recorded hashes stay valid: this node hashed to the same before
	// secrets existed.
	if want := "sha256:09da790810828b412713f8b8e3413631f71273bae93f17456f6f987b11c1d16c"; h != want {
		t.Errorf("hash of a node with plain env changed: %s, recorded ones are %s", h, want)
	}
	same := n
	no := false
	same.Name, same.DependsOn, same.Env = "other", []string{"z"}, map[string]dag.EnvValue{"B": dag.Text("2"), "A": dag.Text("1")}
	same.Become, same.BecomeUser = &no, "app" // become_user without become does not become
	if dag.SpecHash(&same) != h {
		t.Errorf("hash changed with name, depends_on, env order or a become_user that does not apply")
	}
	mutations := map[string]func(*dag.Node){
		"run":     func(n *dag.Node) { n.Run += " " },
		"check":   func(n *dag.Node) { n.Check = "" },
		"delete":  func(n *dag.Node) { n.Delete = "rm" },
		"env":     func(n *dag.Node) { n.Env = map[string]dag.EnvValue{"A": dag.Text("1"), "B": dag.Text("3")} },
		"env key": func(n *dag.Node) { n.Env = map[string]dag.EnvValue{"A": dag.Text("1"), "C": dag.Text("2")} },
		// A secret's name is not the same text: {secret: "2"} differs from "2".
		"secret":      func(n *dag.Node) { n.Env = map[string]dag.EnvValue{"A": dag.Text("1"), "B": dag.SecretRef("2")} },
		"secret name": func(n *dag.Node) { n.Env = map[string]dag.EnvValue{"A": dag.Text("1"), "B": dag.SecretRef("other")} },
		"timeout":     func(n *dag.Node) { n.Timeout = dag.Duration(601e9) },
		"split":       func(n *dag.Node) { n.Run, n.Check = "apt-get install", "x command -v x" },
		"become":      func(n *dag.Node) { t := true; n.Become = &t },
		"become_user": func(n *dag.Node) { t := true; n.Become, n.BecomeUser = &t, "app" },
	}
	for name, m := range mutations {
		c := n
		m(&c)
		if dag.SpecHash(&c) == h {
			t.Errorf("hash did not change with %s", name)
		}
	}
	// A default timeout hashes like the same timeout written out.
	a, b := dag.Node{Run: "x"}, dag.Node{Run: "x", Timeout: dag.Duration(dag.DefaultNodeTimeout)}
	if dag.SpecHash(&a) != dag.SpecHash(&b) {
		t.Errorf("default timeout hashes differently from the written default")
	}
}
