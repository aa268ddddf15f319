package project

import "strings"

// The layout of the gantry_state bucket that is the state-store's own (the
// per-host keys are events.HostNodeKey, in the wire contract: the other
// services' tests write them to show that the planner never reads them): a
// workflow's summary, one document per formula and one per node, so that
// an event rewrites one small document whatever the workflow's size.

// WorkflowDocKey is a workflow's summary.
func WorkflowDocKey(id string) string { return "wf." + id }

// FormulaDocKey is one formula's document.
func FormulaDocKey(id, formula string) string {
	return "wf." + id + "." + formula
}

// FormulaDocPrefix is the start of every formula (and node) document of a
// workflow.
func FormulaDocPrefix(id string) string { return "wf." + id + "." }

// NodeDocKey is one node's document; state.workflow assembles them.
func NodeDocKey(id, formula, node string) string {
	return "wf." + id + "." + formula + "." + node
}

// CheckpointKey holds the GANTRY_EVENTS stream sequence (decimal) up to
// which the state-store has written every event's effects: where it
// resumes following the stream.
const CheckpointKey = "meta.applied"

// workflowOf returns the workflow id of a wf.<id>[.<formula>[.<node>]]
// key, or of a page or a document's value of its own (Pages).
func workflowOf(key string) string {
	rest, ok := strings.CutPrefix(key, "wf.")
	for _, prefix := range []string{pagePrefix, ownPrefix} {
		if !ok {
			rest, ok = strings.CutPrefix(key, prefix)
		}
	}
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ".")
	return id
}
