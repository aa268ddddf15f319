package events

import (
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Type is a CloudEvents type: "gantry.<family>.<what>".
type Type string

// Families of event types. A family has one payload struct.
const (
	FamilyWorkflow = "workflow" // WorkflowEvent; WorkflowPruned for gantry.workflow.pruned
	FamilyFormula  = "formula"  // FormulaEvent
	FamilyNode     = "node"     // NodeEvent
	FamilyHealth   = "health"   // HealthEvent
	FamilyLog      = "log"      // LogLine
	FamilyWork     = "work"     // Dispatch (formula-ready work), GateRequest
	FamilyRollout  = "rollout"  // RolloutEvent
	FamilyProgress = "progress" // ProgressEvent
)

// SchemaVersion is the version of every payload; it is in dataschema
// ("urn:gantry:v1:node"). A consumer rejects a version it does not know;
// fields are only ever added within a version.
const SchemaVersion = "v1"

const typePrefix = "gantry."

// Types of health, log and work events (the state-named ones are built by
// WorkflowType, FormulaType and NodeType).
const (
	TypeHealthAttempt Type = "gantry.health.attempt" // one check ran (not final)
	TypeHealthPassed  Type = "gantry.health.passed"  // final: the gate passed
	TypeHealthFailed  Type = "gantry.health.failed"  // final: budget or retries used up
	TypeLogLine       Type = "gantry.log.line"
	TypeDispatch      Type = "gantry.work.dispatch"
	TypeGateRequest   Type = "gantry.work.gate"
	// A rollout's batches: one started (its first instance dispatched),
	// one finished (all its instances finished and gated), the rollout
	// stopped (past max_failed: no further batch starts).
	TypeRolloutBatchStarted  Type = "gantry.rollout.batch_started"
	TypeRolloutBatchFinished Type = "gantry.rollout.batch_finished"
	TypeRolloutStopped       Type = "gantry.rollout.stopped"
	// A finished workflow was pruned: its records, documents, events and
	// output lines are being removed by the services that wrote them. It
	// is the one message of the workflow left in GANTRY_EVENTS.
	TypeWorkflowPruned Type = "gantry.workflow.pruned"
	// A running node said how far it has got (a "PROGRESS: n" line of
	// its stdout).
	TypeProgressUpdate Type = "gantry.progress.update"
)

// WorkflowType is the type of a workflow lifecycle event in state s.
func WorkflowType(s dag.WorkflowState) Type {
	return Type(typePrefix + FamilyWorkflow + "." + string(s))
}

// FormulaType is the type of a formula lifecycle event in state s.
func FormulaType(s dag.FormulaState) Type { return Type(typePrefix + FamilyFormula + "." + string(s)) }

// NodeType is the type of a node lifecycle event in state s.
func NodeType(s dag.NodeState) Type { return Type(typePrefix + FamilyNode + "." + string(s)) }

// Family returns the middle part of the type ("node" of gantry.node.failed).
func (t Type) Family() string {
	rest, ok := strings.CutPrefix(string(t), typePrefix)
	if !ok {
		return ""
	}
	fam, _, _ := strings.Cut(rest, ".")
	return fam
}

// What returns the last part of the type ("failed" of gantry.node.failed).
func (t Type) What() string {
	rest, ok := strings.CutPrefix(string(t), typePrefix)
	if !ok {
		return ""
	}
	_, what, _ := strings.Cut(rest, ".")
	return what
}

// Schema is the dataschema URI of the type's payload.
func (t Type) Schema() string { return "urn:gantry:" + SchemaVersion + ":" + t.Family() }

// Known reports whether t is a type this version defines.
func (t Type) Known() bool {
	switch t.Family() {
	case FamilyWorkflow:
		return t == TypeWorkflowPruned || dag.WorkflowState(t.What()).Valid()
	case FamilyFormula:
		return dag.FormulaState(t.What()).Valid()
	case FamilyNode:
		return dag.NodeState(t.What()).Valid()
	}
	switch t {
	case TypeHealthAttempt, TypeHealthPassed, TypeHealthFailed, TypeLogLine, TypeDispatch, TypeGateRequest,
		TypeRolloutBatchStarted, TypeRolloutBatchFinished, TypeRolloutStopped, TypeProgressUpdate:
		return true
	}
	return false
}
