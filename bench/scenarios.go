package main

import (
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/dag/dagtest"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

func local() map[string]dag.Host {
	return map[string]dag.Host{"local": {Transport: dag.TransportLocal}}
}

func chain1000() *dag.Composition { return dagtest.Chain(1000) }

func fanout1000() *dag.Composition {
	c := &dag.Composition{Name: "fanout", Hosts: local()}
	for i := 0; i < 1000; i++ {
		c.Formulas = append(c.Formulas, dag.Formula{ID: fmt.Sprintf("f%d", i), Server: "local", Nodes: []dag.Node{{Name: "n", Run: "true"}}})
	}
	return c
}

// fanout1000x5 is fanout-1000 with 5 nodes a formula: 6,000 formula and
// node documents, a workflow the state-store keeps a document a value
// (more than project.MaxPagedDocuments), as a fleet's.
func fanout1000x5() *dag.Composition {
	c := &dag.Composition{Name: "fanout5", Hosts: local()}
	for i := 0; i < 1000; i++ {
		f := dag.Formula{ID: fmt.Sprintf("f%d", i), Server: "local"}
		for n := 0; n < 5; n++ {
			f.Nodes = append(f.Nodes, dag.Node{Name: fmt.Sprintf("n%d", n), Run: "true"})
		}
		c.Formulas = append(c.Formulas, f)
	}
	return c
}

func wide1000() *dag.Composition {
	f := dag.Formula{ID: "wide", Server: "local", MaxParallel: 32}
	for i := 0; i < 1000; i++ {
		f.Nodes = append(f.Nodes, dag.Node{Name: fmt.Sprintf("n%d", i), Run: "true"})
	}
	return &dag.Composition{Name: "wide", Hosts: local(), Formulas: []dag.Formula{f}}
}

// ssh500: 5 hosts, 100 `true` nodes each, chained within each host.
func ssh500(f *sshtest.Fleet) *dag.Composition {
	c := &dag.Composition{Name: "ssh500", Hosts: map[string]dag.Host{}}
	for i, h := range f.Hosts {
		name := fmt.Sprintf("h%d", i)
		c.Hosts[name] = dag.Host{Address: h.Addr, User: f.User}
		fm := dag.Formula{ID: name, Server: name}
		for j := 0; j < 100; j++ {
			fm.Nodes = append(fm.Nodes, dag.Node{Name: fmt.Sprintf("n%d", j), Run: "true", Timeout: dag.Duration(time.Minute)})
		}
		c.Formulas = append(c.Formulas, fm)
	}
	return c
}
