package engine

import (
	"errors"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Record is an accepted workflow, stored in gantry_workflows before the
// submitter hears "accepted".
type Record struct {
	ID         string            `json:"workflow_id"`
	Name       string            `json:"workflow"`
	Operation  dag.Operation     `json:"operation"`
	Status     dag.WorkflowState `json:"status"`
	Generation int               `json:"generation"`
	CreatedAt  time.Time         `json:"created_at"`
	UpdatedAt  time.Time         `json:"updated_at"`
	// GenerationStarts, in a composition's history entry, are when each
	// generation of the run started (on the planner's clock): its
	// acceptance, then each retry. A node's record is as recent as the
	// generation that wrote it (alreadyDone, prune).
	GenerationStarts []time.Time      `json:"generation_starts,omitempty"`
	Composition      *dag.Composition `json:"composition"` // normalized
	// AlreadyDone lists "formula/node" recorded succeeded on its host with
	// the same spec hash when the workflow was accepted: they are skipped.
	AlreadyDone []string `json:"already_done,omitempty"`
	// SkipAtTurnAfter is the revision of gantry_nodes up to which the
	// node records were read for AlreadyDone (a create without reset):
	// the executor skips a node at its turn on the host only after a
	// success of another workflow recorded later (events.Dispatch). Nil:
	// nothing is skipped at the turn.
	SkipAtTurnAfter *uint64 `json:"skip_at_turn_after,omitempty"`
	// Rollback is the delete plan run after a failure under
	// on_failure: rollback; while it runs (and after), the run's plan is
	// this one.
	Rollback   *dag.Composition `json:"rollback,omitempty"`
	FailReason string           `json:"fail_reason,omitempty"` // why the create failed, kept through the rollback
	// SubmittedBy is who submitted it, as the NATS server authenticated them.
	SubmittedBy *events.Principal `json:"submitted_by,omitempty"`
	// Requests counts the control requests carried out: it is part of
	// the Nats-Msg-Id of the transitions they cause, so a resume's
	// running is not dropped as a duplicate of the first.
	Requests int `json:"requests,omitempty"`
	// CancelledBy is set when a cancel was requested while formulas were
	// running: the run is cancelling, and is cancelled (at the request of
	// CancelledBy) once they have ended.
	CancelledBy *events.Principal `json:"cancelled_by,omitempty"`
	// CancelledAt is when that cancel was asked for (or the deadline
	// passed, see Expired): the run ends at the latest CancelWait after
	// it, whatever its running formulas have reported (see
	// ExpireCancels).
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
	// Deadline is when the composition's timeout runs out for the
	// current generation: its acceptance (or its retry) plus the timeout;
	// nil without one.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Expired, once the deadline passed with work unfinished, says so
	// ("deadline: the composition's timeout of 5s passed with ..."): the
	// run stops as a cancel does (nothing new starts, executors kill what
	// runs), and ends failed with this reason.
	Expired string `json:"expired,omitempty"`
	// Held and Carried are what a retry limited to nodes left as it was in
	// the current generation: per formula the nodes that do not run, and
	// the formulas whose failure stays (it fails the run, but does not
	// stop what is retried).
	Held    map[string][]string `json:"held,omitempty"`
	Carried []string            `json:"carried,omitempty"`
	// Trace is the workflow's trace (none when nothing traces it).
	Trace *TraceRef `json:"trace,omitempty"`
	// Announce are the workflow events the last write of this record
	// announced (saveRecord): written with the record, published, then
	// cleared. A workflow event goes out only once the record that says it
	// is written, so a unit of work that loses the record to another
	// planner replica's write has published none of its own (a "succeeded"
	// beaten by a cancel, a "cancelling" beaten by the end). A planner that
	// loads a record still announcing them publishes them, each looked for
	// in the stream first: the one that wrote it stopped before it had.
	Announce []Announcement `json:"announce,omitempty"`
	// Began says how a retry or a rollback began the current generation.
	// The unit of work that begins one writes this record before it
	// dispatches and saves the run snapshot, so a planner that loads the
	// record with the snapshot of the generation before (that unit
	// stopped in between: NATS down, a crash) begins the generation again
	// from it (beginAgain).
	Began *Began `json:"began,omitempty"`
	// PrunedAt is set when a prune chose the finished workflow: its data
	// is being removed, it takes no control request, and the next prune
	// finishes the removal if this one stopped half way.
	PrunedAt *time.Time `json:"pruned_at,omitempty"`
}

// Announcement is a workflow event a record announces (Record.Announce).
type Announcement struct {
	Subject string                `json:"subject"`
	MsgID   string                `json:"msg_id"`
	Event   *events.WorkflowEvent `json:"event"`
}

// Began is how a generation began (Record.Began).
type Began struct {
	Generation int       `json:"generation"`
	At         time.Time `json:"at"` // when (on the planner's clock)
	// Rollback: a rollback began it; every formula of the rollback's plan
	// starts pending.
	Rollback bool `json:"rollback,omitempty"`
	// Rerun are the formulas a retry set back to pending.
	Rerun []string `json:"rerun,omitempty"`
}

// plan returns the plan the run is on: the rollback once it started.
func (r *Record) plan() *dag.Plan {
	if r.Rollback != nil {
		return dag.PlanLoaded(r.Rollback)
	}
	return dag.PlanLoaded(r.Composition)
}

// Snapshot is the run state of a workflow, saved in gantry_runs after every
// event that changes it, so a restarted planner resumes where it was.
type Snapshot = events.RunSnapshot

// stateLetters encodes formula states in snapshots.
var stateLetters = map[dag.FormulaState]byte{
	dag.FormulaPending: 'p', dag.FormulaReady: 'r', dag.FormulaRunning: 'R', dag.FormulaSucceeded: 's', dag.FormulaGating: 'g',
	dag.FormulaHealthy: 'h', dag.FormulaUnhealthy: 'u', dag.FormulaFailed: 'f', dag.FormulaBlocked: 'b', dag.FormulaCancelled: 'c',
}

var letterStates = func() map[byte]dag.FormulaState {
	m := map[byte]dag.FormulaState{}
	for s, l := range stateLetters {
		m[l] = s
	}
	return m
}()

var errStale = errors.New("run state changed underneath (another planner replica?)")
