package dag_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// FuzzParseJSON: any bytes either parse into a composition whose plan
// respects every dependency, or come back as an *InvalidError. Never a
// panic, never a hang.
func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(k8s))
	f.Add([]byte(base(okFormula)))
	f.Add([]byte(`{"name":"t","name":"u"}`))
	f.Add([]byte(`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`))
	f.Add([]byte(base(`{"id":"a","server":"h1","depends_on":["a"],"nodes":[{"name":"n","run":"x","depends_on":["n"]}]}`)))
	f.Add([]byte(`{"name":"t","hosts":{"h":{"transport":"local"}},"formulas":[{"id":"a","server":"h","max_parallel":1e400,"nodes":[{"name":"n","run":"x","timeout":"9999999999999h"}]}]}`))
	f.Add([]byte(fleetDoc))
	f.Add([]byte(`{"name":"t","hosts":{"h":{"address":"a","become":true,"become_user":"app","identity_file":"~/k"},"l":{"transport":"local"}},"formulas":[{"id":"f","server":"h","become":false,"become_user":"#0","nodes":[{"name":"n","run":"x","become":true,"become_user":"db"}]},{"id":"g","server":"l","nodes":[{"name":"n","run":"x","become":true}]}]}`))
	f.Add([]byte(strings.ReplaceAll(fleetDoc, "{{ .Vars.port }}", "{{ .Vars.port | printf \"%q\" }} {{ range .Labels }}{{ . }}{{ end }}")))
	f.Add([]byte(`{"name":"t","extra_vars":{"n":"2"},"hosts":{"h":{"transport":"local","vars":{"l":"[1,{\"a\":[true]}]","m":"{\"p\":8080}","n":"1","b":"x"},"typed_vars":["l","m","n","b"]}},` +
		`"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":"{{ range .Vars.l }}{{ . }}{{ end }}{{ .Vars.m.p }}{{ shq .Vars.l }}{{ .Vars.n }}"}]}]}`))
	f.Add([]byte(outputsDoc(cpFormula + `,{"id":"w","group":"web","nodes":[{"name":"j","run":"{{ output \"cp/init\" \"join_cmd\" }} {{ shq (output \"cp/init\" \"token\") }}","outputs":["x"]},` +
		`{"name":"k","run":"echo {{ output \"w/j\" \"x\" }} ⟦output:cp/init/join_cmd⟧"}]}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := dag.ParseJSONComposition(data)
		if err != nil {
			var inv *dag.InvalidError
			if !errors.As(err, &inv) || len(inv.Problems) == 0 {
				t.Fatalf("error is not a non-empty *InvalidError: %T %v", err, err)
			}
			return
		}
		p := dag.PlanLoaded(c)
		assertRespectsDeps(t, p)
	})
}

// FuzzPlan builds a composition from fuzz bytes (formulas, dependencies that
// may form cycles, node dependencies, gates, max_parallel, targets,
// operation, on_failure), then checks: a cyclic graph is rejected naming a
// cycle; an acyclic one plans with every dependency respected; a simulated
// run (outcomes from the bytes) never starts a formula before its
// prerequisites, always ends, and StepAfter agrees with Step at every event;
// inside each formula NodeStep never exceeds max_parallel or runs a node
// before its dependencies.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{3, 0x81, 0x42, 0x13, 0xff, 0, 7, 9})
	f.Add([]byte{12, 200, 100, 50, 25, 12, 6, 3, 1, 0, 255, 128, 64, 32, 16, 8, 4, 2, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteReader{data: data}
		c, cyclic := fuzzComposition(r)
		p, err := dag.NewPlan(c)
		if err != nil {
			var inv *dag.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("not an *InvalidError: %v", err)
			}
			hasCycle := false
			for _, pr := range inv.Problems {
				if pr.Code == dag.CodeCycle {
					hasCycle = true
				} else {
					t.Fatalf("generated composition has an unexpected problem: %s", pr)
				}
			}
			if !hasCycle || !cyclic {
				t.Fatalf("rejected (cycle reported %v, graph cyclic %v): %v", hasCycle, cyclic, err)
			}
			return
		}
		if cyclic {
			t.Fatalf("a cyclic composition was accepted")
		}
		assertRespectsDeps(t, p)
		outcomes := r.next()
		_, d, _ := simulate(t, p, func(id string) (dag.FormulaState, bool) {
			h := int(outcomes) + len(id)*7 + int(id[len(id)-1])
			if h%11 == 0 {
				return dag.FormulaFailed, true
			}
			return dag.FormulaSucceeded, h%13 != 0
		})
		if !d.Done || (d.Result != dag.WorkflowSucceeded && d.Result != dag.WorkflowFailed) {
			t.Fatalf("run ended with %+v", d)
		}
		for i := range p.Formulas {
			checkNodeRun(t, &p.Formulas[i], r.next())
		}
	})
}

// checkNodeRun runs a formula's nodes with NodeStep, failing nodes chosen
// by seed, and checks max_parallel and dependency order.
func checkNodeRun(t *testing.T, pf *dag.PlannedFormula, seed byte) {
	st := make([]dag.NodeState, len(pf.Nodes))
	for j := range st {
		st[j] = dag.NodePending
	}
	for step := 0; step < 4*len(st)+4; step++ {
		d := pf.NodeStep(st, false, seed%2 == 0)
		for _, b := range d.Blocked {
			st[b.Node] = dag.NodeBlocked
		}
		for _, j := range d.Cancelled {
			st[j] = dag.NodeCancelled
		}
		for _, j := range d.Start {
			for _, k := range pf.Nodes[j].Deps {
				if !st[k].Done() {
					t.Fatalf("%s/%s started while %s is %s", pf.ID, pf.Nodes[j].Name, pf.Nodes[k].Name, st[k])
				}
			}
			st[j] = dag.NodeRunning
		}
		running := 0
		first := -1
		for j, s := range st {
			if s == dag.NodeRunning {
				running++
				if first < 0 {
					first = j
				}
			}
		}
		if running > pf.MaxParallel {
			t.Fatalf("%s: %d nodes running, max_parallel %d", pf.ID, running, pf.MaxParallel)
		}
		if d.Done {
			if running > 0 {
				t.Fatalf("done with %d running", running)
			}
			return
		}
		if first < 0 {
			t.Fatalf("%s: not done but nothing running: %v", pf.ID, st)
		}
		if (int(seed)+first)%7 == 0 {
			st[first] = dag.NodeFailed
		} else {
			st[first] = dag.NodeSucceeded
		}
	}
	t.Fatalf("%s: node run did not end: %v", pf.ID, st)
}

type byteReader struct {
	data []byte
	pos  int
}

func (r *byteReader) next() byte {
	if r.pos >= len(r.data) {
		r.pos++
		return byte(r.pos * 31)
	}
	b := r.data[r.pos]
	r.pos++
	return b
}

// fuzzComposition builds a composition and says whether its formula or
// node graph has a cycle (computed independently of pkg/dag).
func fuzzComposition(r *byteReader) (*dag.Composition, bool) {
	nf := int(r.next()%24) + 1
	c := &dag.Composition{Name: "fuzz", Hosts: map[string]dag.Host{"h": {Transport: dag.TransportLocal}}}
	switch r.next() % 5 {
	case 0:
		c.Operation = dag.OpDelete
	case 1:
		c.Operation = dag.OpCheck
	}
	switch r.next() % 3 {
	case 0:
		c.OnFailure = dag.OnFailureContinue
	case 1:
		c.OnFailure = dag.OnFailureRollback
	}
	cyclicNodes := false
	gated := make([]bool, nf)
	for i := range gated {
		gated[i] = r.next()%3 == 0
	}
	fdeps := make([][]int, nf)
	for i := 0; i < nf; i++ {
		fm := dag.Formula{ID: fmt.Sprintf("f%d", i), Server: "h", MaxParallel: int(r.next()%4) + 1}
		if gated[i] {
			fm.HealthGate = &dag.HealthGate{Check: "true", Timeout: dag.Duration(1e9), Retries: 1}
		}
		nd := int(r.next() % 4)
		for k := 0; k < nd; k++ {
			j := int(r.next()) % nf
			if j == i || containsInt(fdeps[i], j) {
				continue
			}
			// Mostly backward edges (acyclic); sometimes forward ones.
			if j > i && r.next()%4 != 0 {
				continue
			}
			fdeps[i] = append(fdeps[i], j)
			dep := dag.FormulaDep{Formula: fmt.Sprintf("f%d", j)}
			if gated[j] && r.next()%2 == 0 {
				dep.Condition = dag.ConditionHealthy
			} else {
				dep.Condition = dag.ConditionCompleted
			}
			fm.DependsOn = append(fm.DependsOn, dep)
		}
		nn := int(r.next()%5) + 1
		ndeps := make([][]int, nn)
		for j := 0; j < nn; j++ {
			n := dag.Node{Name: fmt.Sprintf("n%d", j), Run: "true", Delete: "true", Check: "true"}
			if r.next()%2 == 0 { // explicit depends_on
				n.DependsOn = []string{}
				for k := 0; k < int(r.next()%3); k++ {
					d := int(r.next()) % nn
					if d == j || containsInt(ndeps[j], d) || (d > j && r.next()%4 != 0) {
						continue
					}
					ndeps[j] = append(ndeps[j], d)
					n.DependsOn = append(n.DependsOn, fmt.Sprintf("n%d", d))
				}
			} else if fm.MaxParallel == 1 && j > 0 {
				ndeps[j] = []int{j - 1}
			}
			fm.Nodes = append(fm.Nodes, n)
		}
		cyclicNodes = cyclicNodes || hasCycle(ndeps)
		c.Formulas = append(c.Formulas, fm)
	}
	if r.next()%4 == 0 {
		// n0 exists in every formula; a formula id selects that formula.
		c.Targets = []string{"n0"}
		if r.next()%2 == 0 {
			c.Targets = []string{fmt.Sprintf("f%d", int(r.next())%nf)}
		}
	}
	return c, cyclicNodes || hasCycle(fdeps)
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// hasCycle is a plain depth-first search, independent of pkg/dag.
func hasCycle(adj [][]int) bool {
	color := make([]int, len(adj))
	var visit func(int) bool
	visit = func(v int) bool {
		color[v] = 1
		for _, w := range adj[v] {
			if color[w] == 1 || color[w] == 0 && visit(w) {
				return true
			}
		}
		color[v] = 2
		return false
	}
	for v := range adj {
		if color[v] == 0 && visit(v) {
			return true
		}
	}
	return false
}
