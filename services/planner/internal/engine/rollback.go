package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// startRollback replaces the failed run with a delete run over the nodes
// that succeeded in it, in reverse dependency order, as a new generation.
func (e *Engine) startRollback(ctx context.Context, r *run, reason string) error {
	rb, skipped, err := e.rollbackComposition(ctx, r)
	if err != nil {
		return err
	}
	r.rec.FailReason = reason
	if rb == nil {
		r.rec.Status = dag.WorkflowFailed
		r.snap.Status = dag.WorkflowFailed
		why := reason + "; nothing to roll back"
		if skipped > 0 {
			why = fmt.Sprintf("%s; nothing to roll back (%d succeeded nodes have no delete)", reason, skipped)
		}
		e.publishWorkflow(ctx, r, dag.WorkflowFailed, why, nil)
		return e.saveRecord(ctx, r)
	}
	r.rec.Rollback = rb
	r.rec.Held, r.rec.Carried = nil, nil
	r.rec.Generation++
	r.rec.Began = &Began{Generation: r.rec.Generation, At: e.now(), Rollback: true}
	r.plan = dag.PlanLoaded(rb)
	r.state = r.plan.NewRunState()
	r.done = map[string]bool{}
	r.rollbackSnapshot()
	msg := fmt.Sprintf("rolling back after %s: deleting %d formulas", reason, len(r.plan.Formulas))
	if skipped > 0 {
		msg += fmt.Sprintf(" (%d succeeded nodes have no delete and stay)", skipped)
	}
	e.Log.Info("rollback", "workflow_id", r.rec.ID, "formulas", len(r.plan.Formulas), "without_delete", skipped)
	e.publishWorkflow(ctx, r, dag.WorkflowRunning, msg, nil)
	if err := e.saveRecord(ctx, r); err != nil {
		return err
	}
	return e.act(ctx, r, r.plan.Step(r.state))
}

// rolledBack is the reason a finished rollback gives: what was undone.
func (e *Engine) rolledBack(ctx context.Context, r *run, result dag.WorkflowState) (string, error) {
	deleted, total := 0, 0
	for i := range r.plan.Formulas {
		pf := &r.plan.Formulas[i]
		for j := range pf.Nodes {
			total++
			st, err := e.nodeState(ctx, r.rec.ID, dag.OpDelete, pf.ID, pf.Nodes[j].Name)
			if err != nil {
				return "", err
			}
			if st == dag.NodeSucceeded {
				deleted++
			}
		}
	}
	reason := fmt.Sprintf("%s; rolled back: %d of %d succeeded nodes deleted", r.rec.FailReason, deleted, total)
	if result != dag.WorkflowSucceeded {
		reason += " (rollback incomplete: " + failedReason(r) + ")"
	}
	return reason, nil
}

// rollbackComposition is the composition that undoes what succeeded: the
// formulas and nodes that succeeded (not those skipped: they were there
// before), with their dependencies among themselves, as operation delete.
// Nodes without a delete command are counted and left in place.
func (e *Engine) rollbackComposition(ctx context.Context, r *run) (*dag.Composition, int, error) {
	keep, skipped, err := e.succeededNodes(ctx, r)
	if err != nil || len(keep) == 0 {
		return nil, skipped, err
	}
	c := rollbackOf(r.rec.Composition, keep)
	if _, err := dag.NewPlan(c); err != nil { // validates and normalizes a subset of a valid plan
		return nil, skipped, fmt.Errorf("rollback plan of %s: %w", r.rec.ID, err)
	}
	return c, skipped, nil
}

// rollbackOf is the delete composition of src's nodes kept (per formula).
func rollbackOf(src *dag.Composition, keep map[string]map[string]bool) *dag.Composition {
	c := &dag.Composition{Name: src.Name, Operation: dag.OpDelete, Hosts: src.Hosts, Retry: src.Retry, OnFailure: dag.OnFailureContinue}
	for _, f := range src.Formulas {
		if nodes := keep[f.ID]; nodes != nil {
			c.Formulas = append(c.Formulas, subset(f, nodes, keep))
		}
	}
	return c
}

// succeededNodes lists, per formula, the nodes the executor recorded
// succeeded by the create that have a delete command; skipped counts the
// succeeded ones without one.
func (e *Engine) succeededNodes(ctx context.Context, r *run) (map[string]map[string]bool, int, error) {
	keep := map[string]map[string]bool{}
	skipped := 0
	for i := range r.plan.Formulas {
		pf := &r.plan.Formulas[i]
		spec := r.plan.Spec(i)
		for j := range pf.Nodes {
			st, err := e.nodeState(ctx, r.rec.ID, dag.OpCreate, pf.ID, pf.Nodes[j].Name)
			if err != nil {
				return nil, 0, err
			}
			switch {
			case st != dag.NodeSucceeded:
			case spec.Nodes[j].Delete == "":
				skipped++
			default:
				if keep[pf.ID] == nil {
					keep[pf.ID] = map[string]bool{}
				}
				keep[pf.ID][pf.Nodes[j].Name] = true
			}
		}
	}
	return keep, skipped, nil
}

// subset is formula f with only the nodes kept, and the dependencies among
// what is kept.
func subset(f dag.Formula, nodes map[string]bool, keep map[string]map[string]bool) dag.Formula {
	nf := dag.Formula{ID: f.ID, Server: f.Server, MaxParallel: f.MaxParallel}
	for _, d := range f.DependsOn {
		if keep[d.Formula] != nil {
			nf.DependsOn = append(nf.DependsOn, dag.FormulaDep{Formula: d.Formula, Condition: dag.ConditionCompleted})
		}
	}
	for _, n := range f.Nodes {
		if !nodes[n.Name] {
			continue
		}
		nn := n
		nn.DependsOn = []string{}
		for _, d := range n.DependsOn {
			if nodes[d] {
				nn.DependsOn = append(nn.DependsOn, d)
			}
		}
		nf.Nodes = append(nf.Nodes, nn)
	}
	return nf
}

// nodeState is a node's outcome as the executor recorded it: "" when it
// recorded none; an error when the record cannot be read.
func (e *Engine) nodeState(ctx context.Context, id string, op dag.Operation, formula, node string) (dag.NodeState, error) {
	rec, _, err := e.Nodes.Get(ctx, events.NodeKey(id, op, formula, node))
	if errors.Is(err, events.ErrNoRecord) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("node record of %s/%s: %w", formula, node, err)
	}
	return rec.Status, nil
}
