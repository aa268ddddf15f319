package dag

// NodeState is the state of one node in a run.
type NodeState string

const (
	NodePending   NodeState = "pending"
	NodeRunning   NodeState = "running"
	NodeSucceeded NodeState = "succeeded"
	NodeFailed    NodeState = "failed"
	NodeSkipped   NodeState = "skipped"   // check passed, or already recorded succeeded
	NodeBlocked   NodeState = "blocked"   // a prerequisite failed; the blocker is named
	NodeCancelled NodeState = "cancelled" // cancelled, or never started under on_failure stop
)

// Terminal reports whether no further transition is expected.
func (s NodeState) Terminal() bool {
	switch s {
	case NodeSucceeded, NodeFailed, NodeSkipped, NodeBlocked, NodeCancelled:
		return true
	}
	return false
}

// Done reports whether the node's work is in place (succeeded or skipped).
func (s NodeState) Done() bool { return s == NodeSucceeded || s == NodeSkipped }

// Valid reports whether s is one of the defined states.
func (s NodeState) Valid() bool { return s == NodePending || s == NodeRunning || s.Terminal() }

// FormulaState is the state of one formula in a run.
type FormulaState string

const (
	FormulaPending   FormulaState = "pending"
	FormulaReady     FormulaState = "ready" // dispatched, waiting for an executor
	FormulaRunning   FormulaState = "running"
	FormulaSucceeded FormulaState = "succeeded" // every node succeeded or was skipped
	FormulaGating    FormulaState = "gating"    // its health gate is being checked
	FormulaHealthy   FormulaState = "healthy"
	FormulaUnhealthy FormulaState = "unhealthy"
	FormulaFailed    FormulaState = "failed"
	FormulaBlocked   FormulaState = "blocked"
	FormulaCancelled FormulaState = "cancelled"
)

// Valid reports whether s is one of the defined states.
func (s FormulaState) Valid() bool {
	switch s {
	case FormulaPending, FormulaReady, FormulaRunning, FormulaSucceeded, FormulaGating,
		FormulaHealthy, FormulaUnhealthy, FormulaFailed, FormulaBlocked, FormulaCancelled:
		return true
	}
	return false
}

// WorkflowState is the state of a whole run.
type WorkflowState string

const (
	WorkflowAccepted  WorkflowState = "accepted"
	WorkflowRunning   WorkflowState = "running"
	WorkflowPaused    WorkflowState = "paused"
	WorkflowSucceeded WorkflowState = "succeeded"
	WorkflowFailed    WorkflowState = "failed"
	WorkflowCancelled WorkflowState = "cancelled"
)

// Valid reports whether s is one of the defined states.
func (s WorkflowState) Valid() bool {
	switch s {
	case WorkflowAccepted, WorkflowRunning, WorkflowPaused, WorkflowSucceeded, WorkflowFailed, WorkflowCancelled:
		return true
	}
	return false
}

// Terminal reports whether the workflow has ended.
func (s WorkflowState) Terminal() bool {
	return s == WorkflowSucceeded || s == WorkflowFailed || s == WorkflowCancelled
}
