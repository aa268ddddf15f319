package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Where each event comes from. An event type travels on one kind of
// subject and is produced by named identities; the server lets only the
// identities whose Usage publishes on a subject kind put anything there
// (PermissionsFor). A consumer applies an event only when Admit says it
// came the way its type comes: the right kind of subject, and the
// subject's host (or workflow id) equal to the one in its data. So a
// health-gate credential, which may publish on decky.*.health and
// nothing else, can never pass off a formula or workflow transition, and
// no event about one host or workflow can be slipped in under another's
// subject.

// Origin is where events of one type come from.
type Origin struct {
	Kind Kind       // the kind of subject it travels on
	By   []Identity // the identities that produce it
}

var (
	planner      = []Identity{Planner}
	executor     = []Identity{Executor}
	healthGate   = []Identity{HealthGate}
	plannerOrExe = []Identity{Planner, Executor}
	// exeOrPlanner: an executor's as a rule, the planner's by exception.
	exeOrPlanner = []Identity{Executor, Planner}
)

// OriginOf is the origin of a known type.
func OriginOf(t Type) (Origin, bool) {
	switch t.Family() {
	case FamilyWorkflow:
		if t == TypeWorkflowPruned || dag.WorkflowState(t.What()).Valid() {
			return Origin{KindWorkflowLifecycle, planner}, true
		}
	case FamilyFormula:
		return formulaOrigin(dag.FormulaState(t.What()))
	case FamilyNode:
		return nodeOrigin(dag.NodeState(t.What()))
	}
	switch t {
	case TypeRolloutBatchStarted, TypeRolloutBatchFinished, TypeRolloutStopped:
		return Origin{KindWorkflowLifecycle, planner}, true
	case TypeProgressUpdate:
		return Origin{KindHostLifecycle, executor}, true
	case TypeHealthAttempt, TypeHealthPassed, TypeHealthFailed:
		return Origin{KindHealth, healthGate}, true
	case TypeLogLine:
		return Origin{KindLogs, executor}, true
	case TypeDispatch:
		return Origin{KindDispatch, planner}, true
	case TypeGateRequest:
		return Origin{KindGate, planner}, true
	}
	return Origin{}, false
}

// formulaOrigin: the planner readies, gates and stops formulas; an
// executor runs them and says how that ended (cancelled too: a dispatch
// of a cancelled run, or the run cancelled while it ran). The planner
// also fails a formula whose timeout passed when no executor reports it
// (none took its work, or its executor gave no outcome within the cancel
// wait), and cancels one no executor took.
func formulaOrigin(s dag.FormulaState) (Origin, bool) {
	switch s {
	case dag.FormulaReady, dag.FormulaGating, dag.FormulaHealthy, dag.FormulaUnhealthy, dag.FormulaBlocked:
		return Origin{KindHostLifecycle, planner}, true
	case dag.FormulaRunning, dag.FormulaSucceeded:
		return Origin{KindHostLifecycle, executor}, true
	case dag.FormulaFailed:
		return Origin{KindHostLifecycle, exeOrPlanner}, true
	case dag.FormulaCancelled:
		return Origin{KindHostLifecycle, plannerOrExe}, true
	}
	return Origin{}, false
}

// nodeOrigin: an executor reports every node it was given; the planner
// the nodes of a formula it blocked or cancelled before dispatch.
func nodeOrigin(s dag.NodeState) (Origin, bool) {
	switch s {
	case dag.NodeRunning, dag.NodeSucceeded, dag.NodeFailed, dag.NodeSkipped:
		return Origin{KindHostLifecycle, executor}, true
	case dag.NodeBlocked, dag.NodeCancelled:
		return Origin{KindHostLifecycle, plannerOrExe}, true
	}
	return Origin{}, false
}

// Publishers are the identities allowed to publish on subjects of kind k,
// as PermissionsFor grants it.
func Publishers(k Kind) []Identity {
	var ids []Identity
	for _, id := range Services {
		for _, s := range Uses(id).Publish {
			if sub, err := ParseSubject(wildcardExample(s)); err == nil && sub.Kind == k {
				ids = append(ids, id)
				break
			}
		}
	}
	return ids
}

// wildcardExample fills a subject pattern's wildcards with a token, to
// parse what kind of subject it stands for.
func wildcardExample(pattern string) string {
	b := []byte(pattern)
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '*' && (i == 0 || b[i-1] == '.') && (i == len(b)-1 || b[i+1] == '.') {
			out = append(out, 'x')
			continue
		}
		out = append(out, b[i])
	}
	return string(out)
}

// SenderBound reports whether the subject alone names a type's producer:
// no identity but its producers may publish where it travels. It is false
// for the planner's and the executors' transitions on
// decky.<host>.lifecycle, which both publish on: there a consumer takes
// from each only what that one decides (the planner steps a run on the
// executors' formula outcomes and the health-gate's verdicts, never on a
// "healthy" it reads).
func SenderBound(t Type) bool {
	o, ok := OriginOf(t)
	if !ok {
		return false
	}
	for _, id := range Publishers(o.Kind) {
		if !slices.Contains(o.By, id) {
			return false
		}
	}
	return true
}

// ErrNotAdmitted is wrapped by every Admit error: an event that did not come
// the way its type comes. It is never applied.
var ErrNotAdmitted = errors.New("event refused")

// about is the part of every payload that says what it is about.
type about struct {
	WorkflowID string `json:"workflow_id"`
	Host       string `json:"host"`
	Node       string `json:"node"`
}

// WorkflowEventOn reads a message received on subject (a workflow's
// lifecycle) as its workflow event: nil and no error when it is none
// (another family, or it does not decode); an error wrapping
// ErrNotAdmitted, with its type, when it did not come the way its type
// comes.
func WorkflowEventOn(subject string, data []byte) (*WorkflowEvent, error) {
	env, err := Parse(data)
	if err != nil || env.Type.Family() != FamilyWorkflow {
		return nil, nil
	}
	if err := Admit(subject, env); err != nil {
		return nil, fmt.Errorf("type %s: %w", env.Type, err)
	}
	var w WorkflowEvent
	if DecodeData(env, &w) != nil {
		return nil, nil
	}
	return &w, nil
}

// Admit checks that env, received on subject, came the way its type comes:
// on the kind of subject its type travels on, about the host (and
// workflow, and node of a log line) its subject names. Its error wraps
// ErrNotAdmitted and says what did not match.
func Admit(subject string, env *Envelope) error {
	o, ok := OriginOf(env.Type)
	if !ok {
		return fmt.Errorf("%w: %s has no origin", ErrNotAdmitted, env.Type)
	}
	sub, err := ParseSubject(subject)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotAdmitted, env.Type, err)
	}
	if sub.Kind != o.Kind {
		return fmt.Errorf("%w: %s on %s: it comes only on %s subjects, from %v", ErrNotAdmitted, env.Type, subject, o.Kind, o.By)
	}
	var a about
	if err := json.Unmarshal(env.Data, &a); err != nil {
		return fmt.Errorf("%w: %s on %s: data: %w", ErrNotAdmitted, env.Type, subject, err)
	}
	switch {
	case sub.Host != "" && dag.HostToken(a.Host) != sub.Host:
		return fmt.Errorf("%w: %s on %s is about host %q", ErrNotAdmitted, env.Type, subject, a.Host)
	case sub.WorkflowID != "" && a.WorkflowID != sub.WorkflowID:
		return fmt.Errorf("%w: %s on %s is about workflow %q", ErrNotAdmitted, env.Type, subject, a.WorkflowID)
	case sub.Kind == KindLogs && a.Node != sub.Node:
		return fmt.Errorf("%w: %s on %s is about node %q", ErrNotAdmitted, env.Type, subject, a.Node)
	}
	return nil
}
