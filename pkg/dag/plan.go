package dag

import "fmt"

// Plan is the topology of one run: which formulas run, in what order, what
// each waits for, and which health gates apply. It is immutable once built;
// what has happened in a run lives in a RunState.
type Plan struct {
	Workflow  string    `json:"workflow"`
	Operation Operation `json:"operation"`
	OnFailure OnFailure `json:"on_failure"`
	Targets   []string  `json:"targets,omitempty"`
	// Timeout is the composition's: the whole run's bound (0: none).
	Timeout Duration `json:"timeout,omitempty"`
	// Formulas are the selected formulas in composition order; their
	// positions are the indexes used by Levels, Order and RunState.
	Formulas []PlannedFormula `json:"formulas"`
	// Levels groups formulas that may run at the same time: level 0 has no
	// prerequisites, level k waits only on lower levels.
	Levels [][]int `json:"-"`
	// LevelIDs is Levels by formula id, for people and the wire.
	LevelIDs [][]string `json:"levels"`
	// Order is a topological order of Formulas (level by level).
	Order []int `json:"-"`
	// NotSelected lists formulas that targets left out.
	NotSelected []string `json:"not_selected,omitempty"`

	comp *Composition
	byID map[string]int
	// rollouts lists, per rolled-out group formula, its instances' indexes.
	rollouts map[string][]int
}

// PlannedFormula is one formula in a plan. Deps point the way the operation
// runs: for delete they are reversed, so a formula is removed only after
// everything built on it.
type PlannedFormula struct {
	ID          string        `json:"id"`
	Server      string        `json:"server"`
	Level       int           `json:"level"`
	Target      bool          `json:"target,omitempty"` // holds (or is) a target
	MaxParallel int           `json:"max_parallel"`
	DependsOn   []FormulaDep  `json:"depends_on,omitempty"`
	Gate        *HealthGate   `json:"health_gate,omitempty"` // nil when this operation runs no gate
	Timeout     Duration      `json:"timeout,omitempty"`     // bound on its nodes from its dispatch (0: none)
	Nodes       []PlannedNode `json:"nodes"`
	NodeOrder   []int         `json:"-"`
	Order       []string      `json:"order"` // NodeOrder by name
	Deps        []Dep         `json:"-"`
	Dependents  []int         `json:"-"`
	Source      int           `json:"-"` // index in Composition.Formulas
	// Instance says which group formula (and rollout batch) this formula
	// is an instance of; nil for a formula written with a server.
	Instance *Instance `json:"instance,omitempty"`
	spec     *Formula
}

// Dep is a prerequisite by plan index.
type Dep struct {
	Formula   int
	Condition Condition
}

// PlannedNode is one node in a plan. Command is what this operation runs
// (run, delete or check).
type PlannedNode struct {
	Name       string   `json:"name"`
	Command    string   `json:"command"`
	Check      string   `json:"check,omitempty"` // create only: exit 0 means already done
	DependsOn  []string `json:"depends_on,omitempty"`
	Level      int      `json:"level"`
	SpecHash   string   `json:"spec_hash"`
	Deps       []int    `json:"-"`
	Dependents []int    `json:"-"`
}

// Composition returns the normalized composition the plan was built from.
func (p *Plan) Composition() *Composition { return p.comp }

// Index returns the plan index of a formula id.
func (p *Plan) Index(id string) (int, bool) {
	i, ok := p.byID[id]
	return i, ok
}

// Spec returns the composition's formula behind plan formula i.
func (p *Plan) Spec(i int) *Formula { return p.Formulas[i].spec }

// NewPlan validates and normalizes c (in place) and plans it. Problems come
// back as an *InvalidError.
func NewPlan(c *Composition) (*Plan, error) {
	if err := Validate(c); err != nil {
		return nil, err
	}
	Normalize(c)
	return planNormalized(c), nil
}

// PlanLoaded plans a composition that Load already validated and normalized.
func PlanLoaded(c *Composition) *Plan { return planNormalized(c) }

func planNormalized(c *Composition) *Plan {
	ids := make(map[string]int, len(c.Formulas))
	for i := range c.Formulas {
		ids[c.Formulas[i].ID] = i
	}
	selected := selectFormulas(c, ids)

	p := &Plan{
		Workflow:  c.Name,
		Operation: c.Operation,
		OnFailure: c.OnFailure,
		Targets:   c.Targets,
		Timeout:   c.Timeout,
		comp:      c,
		byID:      make(map[string]int),
	}
	for i := range c.Formulas {
		if !selected[i] {
			p.NotSelected = append(p.NotSelected, c.Formulas[i].ID)
			continue
		}
		p.byID[c.Formulas[i].ID] = len(p.Formulas)
		p.Formulas = append(p.Formulas, PlannedFormula{Source: i})
	}
	targets := make(map[string]bool, len(c.Targets))
	for _, t := range c.Targets {
		targets[t] = true
	}
	reverse := c.Operation == OpDelete
	deps := make([][]int, len(p.Formulas))
	for k := range p.Formulas {
		pf := &p.Formulas[k]
		f := &c.Formulas[pf.Source]
		pf.spec = f
		pf.ID, pf.Server, pf.MaxParallel, pf.Timeout = f.ID, f.Server, f.MaxParallel, f.Timeout
		pf.Target = targets[f.ID] || holdsTarget(f, targets)
		pf.Instance = f.Instance
		if f.Instance != nil && f.Instance.Batches > 0 && c.Operation == OpCreate {
			if p.rollouts == nil {
				p.rollouts = make(map[string][]int)
			}
			p.rollouts[f.Instance.Of] = append(p.rollouts[f.Instance.Of], k)
		}
		if c.Operation == OpCreate {
			pf.Gate = f.HealthGate
		}
		pf.Nodes, pf.NodeOrder = planNodes(f, c.Operation)
		pf.Order = make([]string, len(pf.NodeOrder))
		for o, j := range pf.NodeOrder {
			pf.Order[o] = pf.Nodes[j].Name
		}
		if reverse {
			continue
		}
		for _, d := range f.DependsOn {
			j, ok := p.byID[d.Formula]
			if !ok { // cannot happen: targets pull in every prerequisite
				panic("dag: prerequisite " + d.Formula + " not selected")
			}
			cond := d.Condition
			if c.Operation != OpCreate {
				cond = ConditionCompleted // no gates run outside create
			}
			pf.Deps = append(pf.Deps, Dep{Formula: j, Condition: cond})
		}
	}
	if reverse { // what depended on f must be deleted before f
		for k := range p.Formulas {
			f := p.Formulas[k].spec
			for _, d := range f.DependsOn {
				// A prerequisite left out by targets is not deleted.
				if j, ok := p.byID[d.Formula]; ok {
					p.Formulas[j].Deps = append(p.Formulas[j].Deps, Dep{Formula: k, Condition: ConditionCompleted})
				}
			}
		}
	}
	for k := range p.Formulas {
		pf := &p.Formulas[k]
		for _, d := range pf.Deps {
			deps[k] = append(deps[k], d.Formula)
			p.Formulas[d.Formula].Dependents = append(p.Formulas[d.Formula].Dependents, k)
			pf.DependsOn = append(pf.DependsOn, FormulaDep{Formula: p.Formulas[d.Formula].ID, Condition: d.Condition})
		}
	}
	lv, order := levels(deps)
	p.Order = order
	for k := range p.Formulas {
		p.Formulas[k].Level = lv[k]
		for len(p.Levels) <= lv[k] {
			p.Levels = append(p.Levels, nil)
		}
	}
	p.LevelIDs = make([][]string, len(p.Levels))
	for _, k := range order {
		p.Levels[lv[k]] = append(p.Levels[lv[k]], k)
		p.LevelIDs[lv[k]] = append(p.LevelIDs[lv[k]], p.Formulas[k].ID)
	}
	if p.Levels == nil {
		p.Levels, p.LevelIDs = [][]int{}, [][]string{}
	}
	return p
}

func holdsTarget(f *Formula, targets map[string]bool) bool {
	if len(targets) == 0 {
		return false
	}
	for i := range f.Nodes {
		if targets[f.Nodes[i].Name] {
			return true
		}
	}
	return false
}

// selectFormulas applies targets: the formulas holding a target node (or
// named as a target) plus every prerequisite, or for delete every formula
// built on them, since those must go first. No targets selects everything.
func selectFormulas(c *Composition, ids map[string]int) []bool {
	sel := make([]bool, len(c.Formulas))
	if len(c.Targets) == 0 {
		for i := range sel {
			sel[i] = true
		}
		return sel
	}
	targets := make(map[string]bool, len(c.Targets))
	for _, t := range c.Targets {
		targets[t] = true
	}
	// edges[i]: formulas to pull in along with i.
	edges := make([][]int, len(c.Formulas))
	for i := range c.Formulas {
		for _, d := range c.Formulas[i].DependsOn {
			j := ids[d.Formula]
			if c.Operation == OpDelete {
				edges[j] = append(edges[j], i)
			} else {
				edges[i] = append(edges[i], j)
			}
		}
	}
	var queue []int
	for i := range c.Formulas {
		if targets[c.Formulas[i].ID] || holdsTarget(&c.Formulas[i], targets) {
			sel[i] = true
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, j := range edges[i] {
			if !sel[j] {
				sel[j] = true
				queue = append(queue, j)
			}
		}
	}
	return sel
}

func planNodes(f *Formula, op Operation) ([]PlannedNode, []int) {
	names := make(map[string]int, len(f.Nodes))
	for j := range f.Nodes {
		names[f.Nodes[j].Name] = j
	}
	nodes := make([]PlannedNode, len(f.Nodes))
	deps := make([][]int, len(f.Nodes))
	for j := range f.Nodes {
		n := &f.Nodes[j]
		pn := &nodes[j]
		pn.Name = n.Name
		pn.SpecHash = SpecHash(n)
		switch op {
		case OpDelete:
			pn.Command = n.Delete
		case OpCheck:
			pn.Command = n.Check
		default:
			pn.Command, pn.Check = n.Run, n.Check
		}
		for _, d := range n.DependsOn {
			k := names[d]
			if op == OpDelete {
				deps[k] = append(deps[k], j)
			} else {
				deps[j] = append(deps[j], k)
			}
		}
	}
	for j := range nodes {
		if len(deps[j]) == 0 {
			continue
		}
		nodes[j].Deps = deps[j]
		nodes[j].DependsOn = make([]string, len(deps[j]))
		for o, k := range deps[j] {
			nodes[j].DependsOn[o] = nodes[k].Name
			nodes[k].Dependents = append(nodes[k].Dependents, j)
		}
	}
	lv, order := levels(deps)
	if op == OpDelete && f.MaxParallel == 1 {
		// One at a time, reverse of the listed order among equals.
		order = reverseStable(lv, order)
	}
	for j := range nodes {
		nodes[j].Level = lv[j]
	}
	return nodes, order
}

// reverseStable keeps the level order but, within a level, takes the later
// listed node first, which is the natural undo order.
func reverseStable(lv, order []int) []int {
	out := make([]int, 0, len(order))
	for i := 0; i < len(order); {
		j := i
		for j < len(order) && lv[order[j]] == lv[order[i]] {
			j++
		}
		for k := j - 1; k >= i; k-- {
			out = append(out, order[k])
		}
		i = j
	}
	return out
}

// String gives a one-line summary.
func (p *Plan) String() string {
	nodes, gates := 0, 0
	for i := range p.Formulas {
		nodes += len(p.Formulas[i].Nodes)
		if p.Formulas[i].Gate != nil {
			gates++
		}
	}
	return fmt.Sprintf("%s: %s %d formulas, %d nodes, %d health gates in %d levels", p.Workflow, p.Operation, len(p.Formulas), nodes, gates, len(p.LevelIDs))
}
