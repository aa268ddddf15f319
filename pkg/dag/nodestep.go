package dag

// NodeDecision is what to do next inside one formula.
type NodeDecision struct {
	Start     []int         // pending nodes to start now, within max_parallel
	Blocked   []BlockedNode // pending nodes a failed node blocks (root cause named)
	Cancelled []int         // pending nodes that will not start because the run is stopping
	Done      bool          // nothing pending or running remains after this decision
	Failed    bool          // some node failed (so the formula fails)
}

// BlockedNode names a node that cannot start and the failed node behind it.
type BlockedNode struct {
	Node    int
	Blocker int
}

// NodeStep decides, from the states of a formula's nodes, which nodes start
// now (in NodeOrder, at most MaxParallel running at once), which are
// blocked by a failure, and whether the formula is done. stop means no new
// node may start (a failure under on_failure stop, a cancel, or a pause);
// a failure inside the formula stops it too unless continueOnFailure.
// nodes must have one state per node. It does not change nodes.
func (pf *PlannedFormula) NodeStep(nodes []NodeState, stop, continueOnFailure bool) NodeDecision {
	var d NodeDecision
	running := 0
	for _, st := range nodes {
		switch st {
		case NodeRunning:
			running++
		case NodeFailed:
			d.Failed = true
		}
	}
	if d.Failed && !continueOnFailure {
		stop = true
	}
	var root []int // root failure behind each node blocked in this pass
	open := running
	for _, j := range pf.NodeOrder {
		if nodes[j] != NodePending {
			continue
		}
		ready, blocker := true, -1
		for _, k := range pf.Nodes[j].Deps {
			switch nodes[k] {
			case NodeSucceeded, NodeSkipped:
			case NodeFailed, NodeCancelled:
				blocker = k
			case NodeBlocked:
				blocker = k
			default:
				if root != nil && root[k] >= 0 {
					blocker = root[k]
				}
				ready = false
			}
			if blocker >= 0 {
				break
			}
		}
		switch {
		case blocker >= 0:
			if root == nil {
				root = make([]int, len(nodes))
				for i := range root {
					root[i] = -1
				}
			}
			root[j] = blocker
			d.Blocked = append(d.Blocked, BlockedNode{Node: j, Blocker: blocker})
		case stop:
			d.Cancelled = append(d.Cancelled, j)
		case ready && running+len(d.Start) < pf.MaxParallel:
			d.Start = append(d.Start, j)
			open++
		default:
			open++
		}
	}
	d.Done = open == 0
	return d
}
