package project

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Audit finds what is wrong in the event stream itself while a replay
// reads it: an event stored more than once (its id again), and a
// transition stored after one it comes before in the same run generation,
// by the order every consumer follows (dag.CompareNode, CompareFormula,
// CompareWorkflow). A consumer applies neither; the audit says where they
// are. Records then holds the fold of the stream against the executors'
// own node records. Events of an earlier generation are history (an
// attempt of it settled late), not a fault. It is not safe for concurrent
// use.
type Audit struct {
	ids       map[string]uint64 // event id: the stream sequence it was first stored at
	nodes     map[string]at[dag.NodeMark]
	formulas  map[string]at[dag.FormulaMark]
	workflows map[string]at[dag.WorkflowMark]
	findings  []events.StreamFinding
}

// at is an entity's last transition taken: where it stands, by which
// event, at which stream sequence.
type at[M any] struct {
	mark M
	typ  events.Type
	seq  uint64
}

// NewAudit starts an audit.
func NewAudit() *Audit {
	return &Audit{ids: map[string]uint64{}, nodes: map[string]at[dag.NodeMark]{}, formulas: map[string]at[dag.FormulaMark]{},
		workflows: map[string]at[dag.WorkflowMark]{}}
}

// Observe takes the event stored at stream sequence seq (one the
// projection admits) in.
func (a *Audit) Observe(seq uint64, env *events.Envelope) {
	first, again := a.ids[env.ID]
	if !again {
		a.ids[env.ID] = seq
	}
	pl, err := env.Payload()
	if err != nil {
		return
	}
	var ref events.Ref
	switch e := pl.(type) {
	case *events.NodeEvent:
		ref = e.Ref
		a.node(seq, env.Type, e)
	case *events.FormulaEvent:
		ref = e.Ref
		a.formula(seq, env.Type, e)
	case *events.WorkflowEvent:
		ref = e.Ref
		a.workflow(seq, env.Type, e)
	default:
		return // progress, health, rollout, pruned: not transitions of their own
	}
	if again {
		a.add(events.StreamFinding{Kind: events.FindingDuplicate, WorkflowID: ref.WorkflowID, Formula: ref.Formula, Node: ref.Node,
			Seqs: []uint64{first, seq}, Detail: fmt.Sprintf("%s (event %s) stored again", env.Type, env.ID)})
	}
}

func (a *Audit) node(seq uint64, typ events.Type, e *events.NodeEvent) {
	k := e.WorkflowID + "/" + e.Formula + "/" + e.Node
	cur, next := a.nodes[k], e.Mark()
	switch o := dag.CompareNode(cur.mark, next); {
	case o == dag.Behind && next.Generation == cur.mark.Generation:
		a.add(events.StreamFinding{Kind: events.FindingOutOfOrder, WorkflowID: e.WorkflowID, Formula: e.Formula, Node: e.Node,
			Seqs: []uint64{cur.seq, seq}, Detail: fmt.Sprintf("%s %s stored after %s %s", typ, nodePlace(next), cur.typ, nodePlace(cur.mark))})
	case o.Moves():
		a.nodes[k] = at[dag.NodeMark]{next, typ, seq}
	}
}

func nodePlace(m dag.NodeMark) string {
	s := fmt.Sprintf("(generation %d, attempt %d", m.Generation, m.Attempt)
	if m.WillRetry {
		s += ", will retry"
	}
	return s + ")"
}

func (a *Audit) formula(seq uint64, typ events.Type, e *events.FormulaEvent) {
	k := e.WorkflowID + "/" + e.Formula
	cur, next := a.formulas[k], e.Mark()
	switch o := dag.CompareFormula(cur.mark, next); {
	case o == dag.Behind && next.Generation == cur.mark.Generation && next.State != dag.FormulaReady:
		// (ready after running is the planner's word that no executor
		// took the work crossing an executor's start: expected.)
		a.add(events.StreamFinding{Kind: events.FindingOutOfOrder, WorkflowID: e.WorkflowID, Formula: e.Formula,
			Seqs: []uint64{cur.seq, seq}, Detail: fmt.Sprintf("%s (generation %d) stored after %s", typ, next.Generation, cur.typ)})
	case o.Moves():
		a.formulas[k] = at[dag.FormulaMark]{next, typ, seq}
	}
}

func (a *Audit) workflow(seq uint64, typ events.Type, e *events.WorkflowEvent) {
	cur, next := a.workflows[e.WorkflowID], e.Mark()
	switch o := dag.CompareWorkflow(cur.mark, next); {
	case o == dag.Behind && next.Generation == cur.mark.Generation:
		a.add(events.StreamFinding{Kind: events.FindingOutOfOrder, WorkflowID: e.WorkflowID,
			Seqs: []uint64{cur.seq, seq}, Detail: fmt.Sprintf("%s (generation %d) stored after %s", typ, next.Generation, cur.typ)})
	case o.Moves():
		a.workflows[e.WorkflowID] = at[dag.WorkflowMark]{next, typ, seq}
	}
}

func (a *Audit) add(f events.StreamFinding) { a.findings = append(a.findings, f) }

// Workflows is how many workflows the audit has seen events of.
func (a *Audit) Workflows() int { return len(a.workflows) }

// Findings are what the audit found, in stream order (a record's finding
// at the node's last transition).
func (a *Audit) Findings() []events.StreamFinding {
	out := slices.Clone(a.findings)
	slices.SortStableFunc(out, func(x, y events.StreamFinding) int { return cmp.Compare(x.Seqs[len(x.Seqs)-1], y.Seqs[len(y.Seqs)-1]) })
	return out
}

// NodeRecords reads the executors' node records (gantry_nodes).
type NodeRecords interface {
	Get(ctx context.Context, key string) (events.NodeRecord, uint64, error)
}

// Records holds each node of the replay (mem) against its executor's
// record, where both speak of the same run generation: a node the stream
// leaves ended one way and the record another, or running in a workflow
// that has ended while the record says how it ended; a node the stream
// says succeeded or skipped with no record at all. A node whose record is
// of another generation, or that the stream says is still at work in a
// workflow still running, is not judged (either may be ahead of the
// other for a moment).
func (a *Audit) Records(ctx context.Context, mem *MemStore, recs NodeRecords) error {
	keys := make([]string, 0, len(mem.Vals))
	for k := range mem.Vals {
		if strings.Count(k, ".") == 3 && strings.HasPrefix(k, "wf.") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := a.record(ctx, mem, recs, k); err != nil {
			return err
		}
	}
	return nil
}

func (a *Audit) record(ctx context.Context, mem *MemStore, recs NodeRecords, key string) error {
	parts := strings.Split(key, ".")
	id, formula, node := parts[1], parts[2], parts[3]
	nd, ok := decodeDoc[events.NodeDoc](mem, key)
	if !ok || nd.Operation == "" {
		return nil
	}
	rec, _, err := recs.Get(ctx, events.NodeKey(id, nd.Operation, formula, node))
	switch {
	case errors.Is(err, events.ErrNoRecord):
		if nd.Status.Done() {
			a.recordFinding(id, formula, node, nd, fmt.Sprintf("the stream says %s; gantry_nodes has no record of it", nd.Status))
		}
		return nil
	case errors.Is(err, events.ErrBadRecord):
		return nil // the record is damaged, not the stream
	case err != nil:
		return fmt.Errorf("check the node records: %w", err)
	}
	m := nd.LastMark()
	if rec.Generation != m.Generation || !rec.Status.Terminal() {
		return nil
	}
	ended := m.State.Terminal() && !m.WillRetry
	switch {
	case ended && rec.Status != m.State:
		a.recordFinding(id, formula, node, nd, fmt.Sprintf("the stream says %s (attempt %d); the executor recorded %s (attempt %d)", m.State, m.Attempt, rec.Status, rec.Attempt))
	case !ended && a.workflowEnded(mem, id, m.Generation):
		a.recordFinding(id, formula, node, nd, fmt.Sprintf("the stream leaves it %s (attempt %d) in a workflow that has ended; the executor recorded %s (attempt %d)", nd.Status, m.Attempt, rec.Status, rec.Attempt))
	}
	return nil
}

func (a *Audit) recordFinding(id, formula, node string, nd *events.NodeDoc, detail string) {
	a.add(events.StreamFinding{Kind: events.FindingRecord, WorkflowID: id, Formula: formula, Node: node, Seqs: []uint64{nd.LastSeq}, Detail: detail})
}

// workflowEnded says whether the replay's workflow id has ended in
// generation gen or later.
func (a *Audit) workflowEnded(mem *MemStore, id string, gen int) bool {
	wd, ok := decodeDoc[events.WorkflowDoc](mem, WorkflowDocKey(id))
	return ok && wd.Status.Terminal() && wd.Generation >= gen
}

func decodeDoc[T any](mem *MemStore, key string) (*T, bool) {
	b, ok := mem.Vals[key]
	if !ok {
		return nil, false
	}
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, false
	}
	return v, true
}
