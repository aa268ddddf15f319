package events

import "github.com/gantry-dev/gantry/pkg/dag"

// Where an event's transition stands in its entity's life, for
// dag.CompareNode, CompareFormula and CompareWorkflow: the one rule every
// consumer that folds events follows.

// Mark is the node transition's place: its generation, attempt and state,
// and whether it is a failed attempt that another follows.
func (e *NodeEvent) Mark() dag.NodeMark {
	return dag.NodeMark{Generation: e.Generation, Attempt: e.Attempt, State: e.Status, WillRetry: e.WillRetry && e.Status == dag.NodeFailed}
}

// Mark is the formula transition's place: its generation and state.
func (e *FormulaEvent) Mark() dag.FormulaMark {
	return dag.FormulaMark{Generation: e.Generation, State: e.Status}
}

// Mark is the workflow transition's place: its generation and state.
func (e *WorkflowEvent) Mark() dag.WorkflowMark {
	return dag.WorkflowMark{Generation: e.Generation, State: e.Status}
}
