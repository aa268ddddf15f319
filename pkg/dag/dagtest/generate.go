// Package dagtest builds compositions for tests and benchmarks.
package dagtest

import (
	"fmt"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Layered returns a composition of formulas*nodesPer nodes: formulas are
// laid out in levels of width; each formula past the first level depends on
// up to two formulas of the level before it (every tenth waiting for
// healthy on a gated one). Nodes inside a formula form a chain. Hosts are
// local, one per 100 formulas.
func Layered(formulas, nodesPer, width int) *dag.Composition {
	c := &dag.Composition{
		Name:     "layered",
		Hosts:    map[string]dag.Host{},
		Formulas: make([]dag.Formula, formulas),
	}
	for h := 0; h <= formulas/100; h++ {
		c.Hosts[fmt.Sprintf("h%d", h)] = dag.Host{Transport: dag.TransportLocal}
	}
	for i := 0; i < formulas; i++ {
		f := &c.Formulas[i]
		f.ID = fmt.Sprintf("f%d", i)
		f.Server = fmt.Sprintf("h%d", i/100)
		f.Nodes = make([]dag.Node, nodesPer)
		for j := range f.Nodes {
			f.Nodes[j] = dag.Node{Name: fmt.Sprintf("n%d", j), Run: fmt.Sprintf("echo %d-%d", i, j), Check: "false"}
		}
		if i%10 == 0 {
			f.HealthGate = &dag.HealthGate{Check: "true", Timeout: dag.Duration(1e9), Retries: 3}
		}
		if level := i / width; level > 0 {
			pos := i % width
			a := (level-1)*width + pos
			b := (level-1)*width + (pos+1)%width
			cond := dag.ConditionCompleted
			if a%10 == 0 {
				cond = dag.ConditionHealthy
			}
			f.DependsOn = append(f.DependsOn, dag.FormulaDep{Formula: fmt.Sprintf("f%d", a), Condition: cond})
			if b != a && b < i {
				f.DependsOn = append(f.DependsOn, dag.FormulaDep{Formula: fmt.Sprintf("f%d", b)})
			}
		}
	}
	return c
}

// Chain returns n one-node local formulas, each depending on the one before.
func Chain(n int) *dag.Composition {
	c := &dag.Composition{Name: "chain", Hosts: map[string]dag.Host{"local": {Transport: dag.TransportLocal}}}
	for i := 0; i < n; i++ {
		f := dag.Formula{ID: fmt.Sprintf("f%d", i), Server: "local", Nodes: []dag.Node{{Name: "n", Run: "true"}}}
		if i > 0 {
			f.DependsOn = []dag.FormulaDep{{Formula: fmt.Sprintf("f%d", i-1)}}
		}
		c.Formulas = append(c.Formulas, f)
	}
	return c
}
