package dag

import "cmp"

// The order of transitions. JetStream delivers at least once, and a
// publisher that stores an event again after the stream's duplicate
// window has passed (as after a long loss of quorum) leaves it twice in
// the stream, the second copy after later transitions (a node's running
// after its succeeded). Every consumer that folds events into a state (the
// state-store's projection, the planner, gantry watch, the web view) asks
// the functions below where an event stands against what it holds, and
// takes a transition only when it is Ahead.

// Order is where a transition stands against the state a consumer holds.
type Order int

const (
	// Behind: an earlier place in the entity's life (an older generation,
	// an earlier attempt, an earlier step of the same attempt): a late or
	// repeated event, which changes nothing.
	Behind Order = iota
	// Same: the place and the state held, again (a repeat, or the same
	// state announced again with other details, as an attempt waiting for
	// a slot and then for its host lock): not a new transition.
	Same
	// Other: the same place, another state of the same step (the planner
	// cancelled a formula that its executor later reports as ended;
	// running and paused of a workflow): not a step back; a consumer
	// that shows what was said last takes it, one that decides on it
	// (the planner) keeps its first word.
	Other
	// Ahead: a new transition.
	Ahead
)

func (o Order) String() string {
	switch o {
	case Behind:
		return "behind"
	case Same:
		return "same"
	case Other:
		return "other"
	case Ahead:
		return "ahead"
	}
	return "unknown"
}

// Moves says whether a consumer that shows the last word takes the
// transition: Ahead, or Other.
func (o Order) Moves() bool { return o == Ahead || o == Other }

// NodeMark is where a node transition stands. Generation is its run
// generation (a retry, or a rollback, is a new one). Attempt counts the
// node's attempts across generations (events.NodeEvent.Attempt); it is 0
// for a node that was never attempted (blocked, cancelled or skipped
// before it started). WillRetry marks a failed attempt that another
// follows (the node is still at work).
type NodeMark struct {
	Generation int       `json:"generation"`
	Attempt    int       `json:"attempt"`
	State      NodeState `json:"state"`
	WillRetry  bool      `json:"will_retry,omitempty"`
}

// step orders the states within one attempt: pending; running (however
// often announced: waiting for a slot, for its host lock, started, resumed
// by another executor); failed with a retry to follow; an end (succeeded,
// failed, skipped, blocked, cancelled).
func (m NodeMark) step() int {
	switch {
	case m.State == NodePending || m.State == "":
		return 0
	case m.State == NodeRunning:
		return 1
	case m.State == NodeFailed && m.WillRetry:
		return 2
	}
	return 3
}

// CompareNode says where a node transition next stands against cur, the
// node's last transition taken: by generation, then attempt, then step
// within the attempt. A new attempt (or a retry's generation) is Ahead of
// any end, so a failed node runs again; a running is Behind the end of
// the same attempt. Two ends of the same attempt are Same when they agree,
// else Other (a node never started, blocked by its executor and
// cancelled by the planner). The zero NodeMark is behind everything.
func CompareNode(cur, next NodeMark) Order {
	if c := cmp.Compare(next.Generation, cur.Generation); c != 0 {
		return sign(c)
	}
	if c := cmp.Compare(next.Attempt, cur.Attempt); c != 0 {
		return sign(c)
	}
	if c := cmp.Compare(next.step(), cur.step()); c != 0 {
		return sign(c)
	}
	if next.State == cur.State {
		return Same
	}
	return Other
}

// FormulaMark is where a formula transition stands: its run generation
// and state.
type FormulaMark struct {
	Generation int
	State      FormulaState
}

// FormulaRank orders formula states along their lifecycle: pending,
// ready, running, succeeded, gating, then the ends (healthy, unhealthy,
// failed, blocked, cancelled), which rank alike.
func FormulaRank(s FormulaState) int {
	switch s {
	case FormulaPending, "":
		return 0
	case FormulaReady:
		return 1
	case FormulaRunning:
		return 2
	case FormulaSucceeded:
		return 3
	case FormulaGating:
		return 4
	}
	return 5
}

// CompareFormula says where a formula transition next stands against
// cur: by generation, then rank. Two different ends of one generation are
// Other (the planner's cancelled, then the executor's own report).
func CompareFormula(cur, next FormulaMark) Order {
	if c := cmp.Compare(next.Generation, cur.Generation); c != 0 {
		return sign(c)
	}
	if c := cmp.Compare(FormulaRank(next.State), FormulaRank(cur.State)); c != 0 {
		return sign(c)
	}
	if next.State == cur.State {
		return Same
	}
	return Other
}

// WorkflowMark is where a workflow transition stands: its run generation
// and state.
type WorkflowMark struct {
	Generation int
	State      WorkflowState
}

// WorkflowRank orders workflow states: accepted; running and paused (a
// workflow goes from one to the other and back); the ends.
func WorkflowRank(s WorkflowState) int {
	switch {
	case s == WorkflowAccepted || s == "":
		return 0
	case s.Terminal():
		return 2
	}
	return 1
}

// CompareWorkflow says where a workflow transition next stands against
// cur: by generation, then rank. Running and paused are Other to each
// other: which came last is the stream's order (a consumer keeps the ids
// of the events it took, to tell a pause stored twice from a new one).
func CompareWorkflow(cur, next WorkflowMark) Order {
	if c := cmp.Compare(next.Generation, cur.Generation); c != 0 {
		return sign(c)
	}
	if c := cmp.Compare(WorkflowRank(next.State), WorkflowRank(cur.State)); c != 0 {
		return sign(c)
	}
	if next.State == cur.State {
		return Same
	}
	return Other
}

func sign(c int) Order {
	if c > 0 {
		return Ahead
	}
	return Behind
}
