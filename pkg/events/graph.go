package events

import (
	"encoding/json"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Graph is the shape of a planned run, without any command, environment
// or host address: which formulas run on which host, what each waits
// for, and its nodes with their dependencies. The planner puts it on the
// accepted event so that anyone who may read events (a viewer, the web
// view) can draw the run's DAG. A plan whose graph would not fit in
// MaxGraphBytes has none: readers fall back to the formulas and nodes that
// the events themselves name.
type Graph struct {
	Formulas []GraphFormula `json:"formulas"`
}

// GraphFormula is one formula of a Graph, in plan order.
type GraphFormula struct {
	ID   string `json:"id"`
	Host string `json:"host"`
	// Of is the group formula (as written) that this one is an instance
	// of, "<of>-<host>"; Batch and Batches its rollout batch (from 1),
	// when the formula is rolled out.
	Of        string           `json:"of,omitempty"`
	Batch     int              `json:"batch,omitempty"`
	Batches   int              `json:"batches,omitempty"`
	DependsOn []dag.FormulaDep `json:"depends_on,omitempty"`
	Gate      bool             `json:"gate,omitempty"` // this operation runs a health gate
	Nodes     []GraphNode      `json:"nodes"`
}

// GraphNode is one node of a GraphFormula, in the formula's run order.
type GraphNode struct {
	Name      string   `json:"name"`
	DependsOn []string `json:"depends_on,omitempty"`
}

// MaxGraphBytes bounds the graph on an accepted event, well within the
// stream's message size.
const MaxGraphBytes = 512 << 10

// GraphOf is plan's graph, or nil when it would exceed MaxGraphBytes.
func GraphOf(plan *dag.Plan) *Graph {
	g := &Graph{Formulas: make([]GraphFormula, 0, len(plan.Formulas))}
	for i := range plan.Formulas {
		pf := &plan.Formulas[i]
		f := GraphFormula{ID: pf.ID, Host: pf.Server, DependsOn: pf.DependsOn, Gate: pf.Gate != nil,
			Nodes: make([]GraphNode, 0, len(pf.Nodes))}
		if pf.Instance != nil {
			f.Of = pf.Instance.Of
			if plan.RolledOut(i) {
				f.Batch, f.Batches = pf.Instance.Batch, pf.Instance.Batches
			}
		}
		byName := make(map[string]dag.PlannedNode, len(pf.Nodes))
		for _, n := range pf.Nodes {
			byName[n.Name] = n
		}
		for _, name := range pf.Order {
			n := byName[name]
			f.Nodes = append(f.Nodes, GraphNode{Name: n.Name, DependsOn: n.DependsOn})
		}
		if len(f.Nodes) != len(pf.Nodes) { // no order: the plan's own
			f.Nodes = f.Nodes[:0]
			for _, n := range pf.Nodes {
				f.Nodes = append(f.Nodes, GraphNode{Name: n.Name, DependsOn: n.DependsOn})
			}
		}
		g.Formulas = append(g.Formulas, f)
	}
	if b, err := json.Marshal(g); err != nil || len(b) > MaxGraphBytes {
		return nil
	}
	return g
}
