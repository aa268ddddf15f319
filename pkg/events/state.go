package events

import (
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// The state-store's projections, as stored in the gantry_state bucket and
// returned by the state.* endpoints.

// MaxHostLog is how many log entries a host node keeps.
const MaxHostLog = 50

// HostNodeKey is where the per-host projection keeps a node of a
// composition (workflow: the composition's name) on a host, in the
// gantry_state bucket: the state-store writes it, and it is what status,
// state and drift report. The planner never reads it: what it skips as
// already done comes from the executors' node records (NodeRecord), so
// the state-store cannot change what runs. Each composition has its
// own records, so two that use the same formula ids never overwrite each
// other's. Every part is a token (no dots: the host goes as its host
// token, dag.HostToken), so the key splits one way; the record holds the
// host's name, which readers compare (two names may share a token across
// compositions). The rest of the bucket's layout is the state-store's own.
func HostNodeKey(host, workflow, formula, node string) string {
	return "host." + dag.HostToken(host) + "." + workflow + "." + formula + "." + node
}

// HostNodePrefix is the start of every HostNodeKey of a host.
func HostNodePrefix(host string) string { return "host." + dag.HostToken(host) + "." }

// HostWorkflowPrefix is the start of every HostNodeKey of a composition on
// a host.
func HostWorkflowPrefix(host, workflow string) string {
	return "host." + dag.HostToken(host) + "." + workflow + "."
}

// WorkflowDoc is the per-workflow projection: every formula and node.
type WorkflowDoc struct {
	WorkflowID string            `json:"workflow_id"`
	Workflow   string            `json:"workflow"`
	Operation  dag.Operation     `json:"operation"`
	Status     dag.WorkflowState `json:"status"`
	Generation int               `json:"generation"`
	Error      string            `json:"error,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	UpdatedAt  time.Time         `json:"updated_at"`
	EndedAt    *time.Time        `json:"ended_at,omitempty"`
	// Formulas is assembled from the per-formula documents when read;
	// the stored summary has none.
	Formulas     map[string]*FormulaDoc `json:"formulas,omitempty"`
	FormulaCount int                    `json:"formula_count"`
	// Pages is how many values of gantry_state hold its formula and
	// node documents, or -1 when each is a value of its own (a large
	// workflow); the state-store's layout, not in replies.
	Pages     int    `json:"pages,omitempty"`
	NodeCount int    `json:"node_count"`
	LastSeq   uint64 `json:"last_seq"` // stream sequence of the last event applied
	// SubmittedBy is who submitted it; Requests, every control request
	// the planner carried out, in order.
	SubmittedBy *Principal `json:"submitted_by,omitempty"`
	Requests    []Request  `json:"requests,omitempty"`
	// Vars are the extra vars it was submitted with (--var, --var-file),
	// a secret-looking name's value shown as "***" (WorkflowEvent.Vars).
	Vars map[string]string `json:"vars,omitempty"`
	// TraceID is the workflow's OpenTelemetry trace, from the traceparent
	// of its accepted event (none when nothing traces it).
	TraceID string `json:"trace_id,omitempty"`
	// EventIDs are the ids of the last MaxWorkflowEventIDs workflow
	// events applied: running and paused alternate, so only its id tells
	// a pause stored twice from a new one.
	EventIDs []string `json:"event_ids,omitempty"`
}

// MaxWorkflowEventIDs is how many event ids a WorkflowDoc keeps.
const MaxWorkflowEventIDs = 32

// Request is one control request carried out on a workflow.
type Request struct {
	Status WorkflowState `json:"status"` // what it led to: paused, running, cancelled
	Reason string        `json:"reason"`
	By     Principal     `json:"by"`
	At     time.Time     `json:"at"`
}

// FormulaDoc is one formula in a WorkflowDoc.
type FormulaDoc struct {
	Generation int                 `json:"generation"`
	LastSeq    uint64              `json:"last_seq"`
	Host       string              `json:"host"`
	Status     dag.FormulaState    `json:"status"`
	Blocker    string              `json:"blocker,omitempty"`
	Error      string              `json:"error,omitempty"`
	StartedAt  *time.Time          `json:"started_at,omitempty"`
	EndedAt    *time.Time          `json:"ended_at,omitempty"`
	Health     *HealthDoc          `json:"health,omitempty"`
	Nodes      map[string]*NodeDoc `json:"nodes"`
}

// HealthDoc is the latest health-gate result of a formula.
type HealthDoc struct {
	Status   HealthStatus `json:"status"`
	Attempts int          `json:"attempts"`
	Final    bool         `json:"final"`
	Output   string       `json:"output,omitempty"`
	Error    string       `json:"error,omitempty"`
	// ExitCode is the last check's exit status (absent when it did not
	// run to an end: the host could not be reached, the check timed out).
	ExitCode *int `json:"exit_code,omitempty"`
}

// NodeDoc is one node in a WorkflowDoc.
type NodeDoc struct {
	Status      dag.NodeState `json:"status"`
	Operation   dag.Operation `json:"operation,omitempty"`    // of the last transition (delete during a rollback)
	Attempts    int           `json:"attempts"`               // attempts started
	LastAttempt int           `json:"last_attempt,omitempty"` // the number of the last one
	ExitCode    *int          `json:"exit_code,omitempty"`
	Error       string        `json:"error,omitempty"`
	Blocker     string        `json:"blocker,omitempty"`
	Reason      string        `json:"reason,omitempty"` // of its last transition: why skipped or cancelled, what it waits for
	Check       CheckResult   `json:"check,omitempty"`
	SpecHash    string        `json:"spec_hash,omitempty"`
	StartedAt   *time.Time    `json:"started_at,omitempty"`
	EndedAt     *time.Time    `json:"ended_at,omitempty"`
	Transitions int           `json:"transitions"` // node events applied (each counted once)
	Generation  int           `json:"generation,omitempty"`
	LastSeq     uint64        `json:"last_seq,omitempty"` // stream sequence of the last event applied
	// Progress is the last percent the node's current attempt reported
	// (a "PROGRESS: n" line); a new attempt starts without one.
	Progress int `json:"progress,omitempty"`
	// Files are the node's files as its last attempt found (and left)
	// them (NodeEvent.Files).
	Files []FileResult `json:"files,omitempty"`
	// Outputs are the values the node handed on when it succeeded, but
	// the secret ones, named in SecretOutputs only.
	Outputs       map[string]string `json:"outputs,omitempty"`
	SecretOutputs []string          `json:"secret_outputs,omitempty"`
	// Mark is where the last transition applied stands (dag.CompareNode):
	// an event behind it changes nothing, one at the same place is not
	// counted again. Documents written before it was kept have none.
	Mark *dag.NodeMark `json:"mark,omitempty"`
}

// LastMark is where the node's last transition stands: its Mark, or for
// a document written before marks were kept, what its fields say.
func (n *NodeDoc) LastMark() dag.NodeMark {
	if n.Mark != nil {
		return *n.Mark
	}
	return dag.NodeMark{Generation: n.Generation, Attempt: n.LastAttempt, State: n.Status}
}

// HostNode is the per-host projection of one node of a composition across
// its workflows (runs). Its
// status is the node's last transition in a create or delete, whatever it
// was (a node blocked or cancelled shows so); InPlace says what a create
// left on the host, which a transition that did not run the node leaves
// as it was. An operation: check run changes neither: it is kept in Check.
type HostNode struct {
	Host       string         `json:"host"`
	Workflow   string         `json:"workflow"` // the composition's name
	Formula    string         `json:"formula"`
	Node       string         `json:"node"`
	Status     dag.NodeState  `json:"status"`
	Operation  dag.Operation  `json:"operation"`
	SpecHash   string         `json:"spec_hash"`
	WorkflowID string         `json:"workflow_id"`
	StartedAt  *time.Time     `json:"started_at,omitempty"`
	EndedAt    *time.Time     `json:"ended_at,omitempty"`
	Actor      string         `json:"actor,omitempty"`
	Blocker    string         `json:"blocker,omitempty"`
	InPlace    *InPlace       `json:"in_place,omitempty"`
	Check      *HostCheck     `json:"check,omitempty"`
	Log        []HostLogEntry `json:"log"`
	LastSeq    uint64         `json:"last_seq"`
}

// InPlace is the create that last completed a node on its host
// (succeeded, or skipped: its check passed or it was already done), as
// long as nothing has run the node since: a create or delete that starts
// it again, fails or deletes it removes InPlace; a node blocked or
// cancelled before it started keeps it. It is what drift calls ok; the
// planner decides the same from the executors' node records of the
// composition's runs (the planner's engine, alreadyDone), not from this.
type InPlace struct {
	Status     dag.NodeState `json:"status"` // succeeded or skipped
	SpecHash   string        `json:"spec_hash"`
	WorkflowID string        `json:"workflow_id"`
	EndedAt    *time.Time    `json:"ended_at,omitempty"`
}

// HostCheck is the last operation: check run of a node: what its check
// found, which says nothing was done.
type HostCheck struct {
	// Status is the check's own: running; succeeded (a verdict, in
	// Result); failed (no verdict: the check could not run); blocked or
	// cancelled.
	Status     dag.NodeState `json:"status"`
	Result     CheckResult   `json:"result,omitempty"` // ok or would_change
	SpecHash   string        `json:"spec_hash,omitempty"`
	WorkflowID string        `json:"workflow_id"`
	EndedAt    *time.Time    `json:"ended_at,omitempty"`
	Error      string        `json:"error,omitempty"`
}

// HostLogEntry is one transition in a HostNode's log.
type HostLogEntry struct {
	Time       time.Time     `json:"ts"`
	Event      Type          `json:"event"`
	WorkflowID string        `json:"workflow_id"`
	Operation  dag.Operation `json:"operation,omitempty"`
	Status     dag.NodeState `json:"status"`
	Attempt    int           `json:"attempt"`
	Error      string        `json:"error,omitempty"`
	// Generation and WillRetry complete the transition's place
	// (dag.NodeMark): the last entry of a workflow is where that
	// workflow's transitions of the node stand.
	Generation int  `json:"generation,omitempty"`
	WillRetry  bool `json:"will_retry,omitempty"`
}

// Mark is where the logged transition stands.
func (e *HostLogEntry) Mark() dag.NodeMark {
	return dag.NodeMark{Generation: e.Generation, Attempt: e.Attempt, State: e.Status, WillRetry: e.WillRetry}
}

// Request bodies of the state endpoints.
type (
	WorkflowQuery struct {
		WorkflowID string `json:"workflow_id"`
	}
	HostQuery struct {
		Host string `json:"host,omitempty"` // empty: every host
	}
	ListQuery struct {
		Limit int `json:"limit,omitempty"`
	}
)

// WorkflowSummary is one row of state.list.
type WorkflowSummary struct {
	WorkflowID string            `json:"workflow_id"`
	Workflow   string            `json:"workflow"`
	Operation  dag.Operation     `json:"operation"`
	Status     dag.WorkflowState `json:"status"`
	CreatedAt  time.Time         `json:"created_at"`
	UpdatedAt  time.Time         `json:"updated_at"`
	Formulas   int               `json:"formulas"`
	Nodes      int               `json:"nodes"`
	EndedAt    *time.Time        `json:"ended_at,omitempty"`
	// SubmittedBy is who submitted it, as the server authenticated them.
	SubmittedBy *Principal `json:"submitted_by,omitempty"`
}

// SubmitReply is the reply of workflow.submit and workflow.validate.
type SubmitReply struct {
	WorkflowID string        `json:"workflow_id,omitempty"`
	Status     string        `json:"status"` // accepted | valid | rejected
	Plan       *dag.Plan     `json:"plan,omitempty"`
	Errors     []string      `json:"errors,omitempty"`
	Problems   []dag.Problem `json:"problems,omitempty"`
	// Warnings are what the submitter should know of an accepted
	// workflow (its accepted event not stored yet).
	Warnings []string `json:"warnings,omitempty"`
	// TraceID is the OpenTelemetry trace of an accepted workflow, when
	// anything traces it (the submitter's traceparent, or a planner that
	// exports spans).
	TraceID string `json:"trace_id,omitempty"`
}

// Drift states of a node: what a composition wants against what the
// per-host projection records.
const (
	DriftOK       = "ok"       // in place (HostNode.InPlace), same spec hash
	DriftMissing  = "missing"  // never done, deleted, or its last run did not complete
	DriftChanged  = "changed"  // in place, but with another spec hash
	DriftOrphaned = "orphaned" // in place on a host of the composition, but not in it
)

// DriftItem is one node in a drift report.
type DriftItem struct {
	Host       string `json:"host"`
	Formula    string `json:"formula"`
	Node       string `json:"node"`
	Drift      string `json:"drift"`
	WantSpec   string `json:"want_spec,omitempty"`
	HaveSpec   string `json:"have_spec,omitempty"`
	HaveStatus string `json:"have_status,omitempty"`
	WorkflowID string `json:"workflow_id,omitempty"` // that last touched it
}

// DriftQuery is the body of state.drift: the nodes a composition wants
// on its hosts, each with the spec hash of its command as rendered. The
// requester renders the composition (gantry drift --records loads it on
// the user's side, as gantry validate does), so the state-store renders
// no template for a read: it compares hashes with its records.
type DriftQuery struct {
	Workflow string      `json:"workflow"`
	Nodes    []DriftWant `json:"nodes"`
}

// DriftWant is one node a composition wants: on host, of formula (an
// instance's id, for a group formula), with spec hash Spec.
type DriftWant struct {
	Host    string `json:"host"`
	Formula string `json:"formula"`
	Node    string `json:"node"`
	Spec    string `json:"spec"`
}

// DriftQueryOf is the query of a composition's plan.
func DriftQueryOf(p *dag.Plan) DriftQuery {
	q := DriftQuery{Workflow: p.Workflow, Nodes: []DriftWant{}}
	for i := range p.Formulas {
		pf := &p.Formulas[i]
		for j := range pf.Nodes {
			q.Nodes = append(q.Nodes, DriftWant{Host: pf.Server, Formula: pf.ID, Node: pf.Nodes[j].Name, Spec: pf.Nodes[j].SpecHash})
		}
	}
	return q
}

// DriftQueryProblem says what is wrong with a drift query ("" when
// nothing): a name that is not one a composition may hold, or more nodes
// than a composition fans out into.
func DriftQueryProblem(q *DriftQuery) string {
	if !dag.IsToken(q.Workflow) {
		return "workflow is missing or not a composition name (state.drift takes the nodes a composition wants, rendered on the requester's side: gantry drift --records)"
	}
	if len(q.Nodes) > dag.MaxExpandedNodes {
		return "more nodes than a composition may have"
	}
	for _, n := range q.Nodes {
		if p := dag.HostNameProblem(n.Host); p != "" {
			return "host " + p
		}
		if !dag.IsToken(n.Formula) || !dag.IsToken(n.Node) {
			return "a formula or node name is missing or not a token"
		}
	}
	return ""
}

// DriftReport is the reply of state.drift.
type DriftReport struct {
	Workflow string         `json:"workflow"`
	Counts   map[string]int `json:"counts"`
	Items    []DriftItem    `json:"items"`
}

// RebuildQuery is the body of state.rebuild.
type RebuildQuery struct {
	CheckOnly bool `json:"check_only,omitempty"`
	// TimeoutMS bounds the rebuild, in milliseconds (the client's
	// --timeout): the state-store gives up and says so before the client
	// stops waiting (0: its own bound, 5 minutes).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// Kinds of StreamFinding.
const (
	// FindingDuplicate: one event (its CloudEvent id) stored more than
	// once.
	FindingDuplicate = "duplicate"
	// FindingOutOfOrder: a transition stored after one it comes before
	// in the same run (dag.CompareNode, CompareFormula, CompareWorkflow):
	// a node's running after its succeeded.
	FindingOutOfOrder = "out_of_order"
	// FindingRecord: the stream says one thing of a node's run and the
	// executor's own record (gantry_nodes) another.
	FindingRecord = "contradicts_record"
)

// MaxFindings is how many findings a RebuildReport lists; it counts the
// rest in MoreFindings.
const MaxFindings = 200

// StreamFinding is something wrong in the event stream itself that
// state.rebuild found while it replayed it.
type StreamFinding struct {
	Kind       string `json:"kind"`
	WorkflowID string `json:"workflow_id"`
	Formula    string `json:"formula,omitempty"`
	Node       string `json:"node,omitempty"`
	// Seqs are the stream sequences involved, in order: the first copy
	// and the one stored again; the transition stored first and the one
	// behind it; the last transition of the node.
	Seqs   []uint64 `json:"seqs"`
	Detail string   `json:"detail"`
}

// RebuildReport answers state.rebuild: how the live projection compares
// with a replay of the event stream, and what could not be rebuilt.
type RebuildReport struct {
	Keys      int      `json:"keys"`      // documents in the replay
	UpTo      uint64   `json:"up_to"`     // last stream sequence replayed
	Differing []string `json:"differing"` // keys whose live value differs (or is missing on one side)
	Rewritten bool     `json:"rewritten"` // the live projection was replaced by the replay
	// FirstSeq is the first event the stream still holds. Events before
	// it were purged (or passed the stream's age limit): what they built
	// cannot be rebuilt, and Lost says so.
	FirstSeq uint64 `json:"first_seq"`
	Lost     string `json:"lost,omitempty"`
	// Kept lists documents left as they are because the events that
	// built them are gone: live documents no remaining event backs, and
	// ones the remaining events would rebuild only in part.
	Kept []string `json:"kept,omitempty"`
	// Workflows is how many workflows the replay checked the stream of;
	// Findings is what it found wrong in it (at most MaxFindings, in
	// stream order; MoreFindings counts the rest).
	Workflows    int             `json:"workflows"`
	Findings     []StreamFinding `json:"findings,omitempty"`
	MoreFindings int             `json:"more_findings,omitempty"`
}
