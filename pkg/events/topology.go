package events

import (
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// The topology: every stream, durable consumer and bucket by name, the
// subjects each stream stores and the keys records are stored under. The
// permissions (access.go) are derived from it; pkg/eventbus builds the
// JetStream settings of each from it.

// Stream names.
const (
	StreamEvents   = "GANTRY_EVENTS"   // lifecycle and health events (limits)
	StreamDispatch = "GANTRY_DISPATCH" // formula-ready work (work queue)
	StreamGates    = "GANTRY_GATES"    // health-gate work (work queue)
	StreamLogs     = "GANTRY_LOGS"     // output lines (limits, bounded in time and size)
)

// Durable consumer names: one per service, shared by its replicas. The
// state-store has none: it follows GANTRY_EVENTS with an ordered consumer
// from its own checkpoint (its own key in gantry_state). Retired durables are in
// Uses: the service that had one deletes it.
const (
	ConsumerPlanner    = "planner"
	ConsumerExecutor   = "executor"
	ConsumerHealthGate = "health-gate"
)

// KV buckets.
const (
	BucketWorkflows = "gantry_workflows" // accepted submissions, by workflow id (planner)
	BucketState     = "gantry_state"     // projections (state-store)
	BucketNodes     = "gantry_nodes"     // node attempts and completions (executor)
	BucketRuns      = "gantry_runs"      // run state snapshots (planner)
	// BucketOutputs holds the values nodes hand on (outputs), secret ones
	// too: executors write it, executors and health gates read it, no one
	// else may (see OutputRecord).
	BucketOutputs = "gantry_outputs"
)

// StreamNames lists every stream.
var StreamNames = []string{StreamEvents, StreamDispatch, StreamGates, StreamLogs}

// StreamSubjects are the subjects stream stores (none for a name that is
// not one of StreamNames). No subject is stored by two streams.
func StreamSubjects(stream string) []string {
	switch stream {
	case StreamEvents:
		return []string{AllWorkflowLifecycle, AllHostLifecycle, AllHealth}
	case StreamDispatch:
		return []string{AllDispatch}
	case StreamGates:
		return []string{AllGate}
	case StreamLogs:
		return []string{AllLogs}
	}
	return nil
}

// StreamOf is the stream that stores subject ("" for none of gantry's).
func StreamOf(subject string) string {
	for _, stream := range StreamNames {
		for _, f := range StreamSubjects(stream) {
			if subjectMatches(f, subject) {
				return stream
			}
		}
	}
	return ""
}

// subjectMatches says whether subject matches filter: "*" is one token, a
// final ">" one or more.
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return i == len(ft)-1 && len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

// Durables are the names of stream's durable consumers, the executors'
// of hosts without a zone among them (the executors of a zone have one of
// their own, ExecutorDurable).
func Durables(stream string) []string {
	switch stream {
	case StreamEvents:
		return []string{ConsumerPlanner}
	case StreamDispatch:
		return []string{ExecutorDurable("")}
	case StreamGates:
		return []string{ConsumerHealthGate}
	}
	return nil
}

// ExecutorDurable is the name of the durable consumer of the executors of
// a zone on GANTRY_DISPATCH ("" for executors started without one):
// ConsumerExecutor, or executor-zone-<zone>.
func ExecutorDurable(zone string) string {
	if zone == "" {
		return ConsumerExecutor
	}
	return ConsumerExecutor + "-zone-" + zone
}

// BucketNames lists every KV bucket.
var BucketNames = []string{BucketWorkflows, BucketState, BucketNodes, BucketRuns, BucketOutputs, BucketSlots}

// MsgID is the Nats-Msg-Id of an event: stable for the same transition, so
// a retried publish is stored once.
func MsgID(parts ...string) string {
	n := 0
	for _, p := range parts {
		n += len(p) + 1
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, '|')
		}
		b = append(b, p...)
	}
	return string(b)
}

// OutputKey is the gantry_outputs key of a node's outputs: by the
// composition's name, not a workflow's id, so that a later run that skips
// the node (already succeeded) reads what it wrote then.
func OutputKey(workflow, formula, node string) string {
	return workflow + "." + formula + "." + node
}

// NodeKey is the gantry_nodes key of a node in a workflow for one
// operation: a rollback's delete is recorded apart from the create.
func NodeKey(workflowID string, op dag.Operation, formula, node string) string {
	return workflowID + "." + string(op) + "." + formula + "." + node
}
