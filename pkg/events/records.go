package events

import (
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Records that one service keeps in a KV bucket and another reads, or a
// service returns to clients: named here so the ties between services are
// visible and versioned (golden files in testdata).

// RunSnapshot is the planner's state of a run, in gantry_runs under the
// workflow id. The executor reads Status and Generation (a cancelled run or
// an older generation's dispatch must not run), and gantry watch reads
// Generation.
type RunSnapshot struct {
	Generation int               `json:"generation"`
	Status     dag.WorkflowState `json:"status"`
	StartedAt  time.Time         `json:"started_at"`
	// Formulas holds one letter per plan formula (the planner's encoding),
	// so a snapshot of 10,000 formulas is 10 kB.
	Formulas string `json:"formulas"`
	// Blockers maps a blocked formula's plan index to its blocker's.
	Blockers map[int]int `json:"blockers,omitempty"`
	// Cancelling: a cancel was requested (or the composition's timeout
	// passed) and the run waits for its running formulas to end; nothing
	// new of it may start.
	Cancelling bool `json:"cancelling,omitempty"`
	// Deadlines holds, per formula dispatched with a timeout and not
	// ended, when that timeout runs out; the planner counts from it again
	// after a restart.
	Deadlines map[string]time.Time `json:"deadlines,omitempty"`
	// Expired lists the formulas of this generation whose timeout passed
	// while they were dispatched: nothing more of them may start, an
	// executor stops what of them runs and reports them failed (deadline).
	Expired []string `json:"expired,omitempty"`
	// Failures says why formulas of this generation failed, by formula id
	// (the executor's error, a health gate's failure), for the reason the
	// workflow ends with: at most MaxFailureReasons, each bounded.
	Failures map[string]string `json:"failures,omitempty"`
}

// MaxFailureReasons is how many formulas' failures a RunSnapshot says
// why of; MaxFailureReasonBytes bounds each.
const (
	MaxFailureReasons     = 8
	MaxFailureReasonBytes = 300
)

// NodeRecord is what the executor keeps per node of a workflow in
// gantry_nodes (under NodeKey). It is written before each attempt and
// after the outcome, so after a crash the next delivery knows how many
// attempts were made and that a succeeded node must not run again. The
// planner reads Status and SpecHash: a record of a past run of the
// composition is what it skips as already done.
type NodeRecord struct {
	Status      dag.NodeState `json:"status"`
	Attempt     int           `json:"attempt"`      // attempts made in all generations
	Generation  int           `json:"generation"`   // the run generation of the last attempt
	GenAttempts int           `json:"gen_attempts"` // attempts made in that generation
	ExitCode    *int          `json:"exit_code,omitempty"`
	SpecHash    string        `json:"spec_hash,omitempty"`
	// StartedAt is when the last attempt started, as its running event
	// says: a delivery that finds the attempt recorded publishes that
	// event again, the same, before the attempt's end (the first copy
	// may never have been stored). Written with the record the attempt
	// writes anyway; none in records written before it was kept.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// Changed are the paths the node's files changed in attempts that did
	// not succeed, since it last did: the next attempt (a retry, a
	// `gantry retry`) names them in $GANTRY_CHANGED with those it changes,
	// as its run has not acted on them yet. None once it succeeds.
	Changed []string `json:"changed,omitempty"`
	// NeverStarted says no attempt of the node in this run started
	// anything on its host (cancelled while it waited for a slot, its host
	// unreachable): the run did not reach the node, and what an earlier
	// create put in place is still there (a submission skips it).
	NeverStarted bool `json:"never_started,omitempty"`
}

// OutputRecord is what a node's run handed on (its outputs), in
// gantry_outputs under OutputKey: written by the executor that ran it once
// it succeeded, before its success is recorded, and read by the executors
// and health gates of the nodes that read them. Values holds every value
// written, secret ones too: the bucket is readable by no one else, and
// secret values never leave it but for the commands that read them.
type OutputRecord struct {
	WorkflowID string            `json:"workflow_id"` // the run that wrote them
	Generation int               `json:"generation"`
	Attempt    int               `json:"attempt"`
	SpecHash   string            `json:"spec_hash"`
	Values     map[string]string `json:"values"`
	Secret     []string          `json:"secret,omitempty"` // the names of the secret ones
	WrittenAt  time.Time         `json:"written_at"`
}

// ControlReply answers cancel, pause, resume and retry.
type ControlReply struct {
	WorkflowID string            `json:"workflow_id"`
	Status     dag.WorkflowState `json:"status"`
	Generation int               `json:"generation"`
}
