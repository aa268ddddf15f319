package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Pruning removes finished workflows: an operator's workflow.prune request
// (gantry prune) or the planner's retention setting makes the planner
// choose them, and each service removes what its own identity wrote. The
// planner announces each workflow it prunes with a WorkflowPruned event on
// workflow.<id>.lifecycle; the executor (gantry_nodes, output lines) and
// the state-store (gantry_state documents) act on it. See
// docs/operations.md, "Retention and prune".

// PruneRequest is the body of a workflow.prune request. At least one of
// OlderThan and Keep is given; with both, a finished run goes only when
// it is older than OlderThan and not among the newest Keep.
type PruneRequest struct {
	// OlderThan: finished more than this long ago ("720h", "30d").
	OlderThan string `json:"older_than,omitempty"`
	// Keep: the newest Keep finished runs of each composition stay.
	Keep *int `json:"keep,omitempty"`
	// DryRun: say what would go, remove nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// ErrBadPrune: a prune request that is not one.
var ErrBadPrune = errors.New("bad prune request")

// ParsePruneRequest reads a workflow.prune body and checks it.
func ParsePruneRequest(body []byte) (PruneRequest, time.Duration, error) {
	var req PruneRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, 0, fmt.Errorf("%w: the body is not JSON like {\"older_than\":\"30d\",\"keep\":5,\"dry_run\":true}: %w", ErrBadPrune, err)
	}
	var age time.Duration
	if req.OlderThan != "" {
		var err error
		if age, err = ParseAge(req.OlderThan); err != nil {
			return req, 0, fmt.Errorf("%w: older_than: %w", ErrBadPrune, err)
		}
	}
	switch {
	case req.Keep != nil && *req.Keep < 0:
		return req, 0, fmt.Errorf("%w: keep %d is negative", ErrBadPrune, *req.Keep)
	case req.OlderThan == "" && req.Keep == nil:
		return req, 0, fmt.Errorf("%w: say which runs go: older_than, keep, or both", ErrBadPrune)
	}
	return req, age, nil
}

// MaxAgeDays bounds an age given in days: a time.Duration holds about
// 106,751 days, and more would wrap round to a short age (or a negative
// one).
const MaxAgeDays = 100 * 365

// ParseAge reads a duration as Go writes them ("36h", "90m") or a number
// of days ("30d"), at most MaxAgeDays. It must be positive.
func ParseAge(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (30d, 12h, 90m)", s)
		}
		if n > MaxAgeDays {
			return 0, fmt.Errorf("%q is more than %d days (%d years)", s, MaxAgeDays, MaxAgeDays/365)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not a duration (30d, 12h, 90m)", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration", s)
	}
	return d, nil
}

// PruneReply answers a workflow.prune request.
type PruneReply struct {
	DryRun bool `json:"dry_run"`
	// Pruned are the workflows removed (or, in a dry run, that would be),
	// oldest first.
	Pruned []PrunedWorkflow `json:"pruned"`
	// Kept are the finished workflows the criteria chose that stay because
	// they are the latest run to have touched a node on its host: what a
	// submission skips as already done is decided from them.
	Kept []KeptWorkflow `json:"kept,omitempty"`
	// Unfinished counts the workflows not finished (accepted, running,
	// paused): never pruned.
	Unfinished int `json:"unfinished"`
	// Removed is what goes from each stream and bucket, as far as the
	// planner can read it: its own buckets, the executors' node records
	// (removed by the executors) and the events (GANTRY_EVENTS). The
	// state-store's documents are counted in Documents, without their size;
	// output lines are not counted here (the executors remove them).
	Removed map[string]StoreSize `json:"removed"`
	// Documents counts the gantry_state documents of the pruned
	// workflows (a summary, one per formula and one per node).
	Documents int `json:"documents"`
	// Errors are workflows that could not be pruned this time (tried again
	// by the next prune).
	Errors []string `json:"errors,omitempty"`
}

// PrunedWorkflow is one workflow a prune removes.
type PrunedWorkflow struct {
	WorkflowID string            `json:"workflow_id"`
	Workflow   string            `json:"workflow"`
	Operation  dag.Operation     `json:"operation"`
	Status     dag.WorkflowState `json:"status"`
	CreatedAt  time.Time         `json:"created_at"`
	EndedAt    time.Time         `json:"ended_at"`
}

// KeptWorkflow is a finished workflow the criteria chose that stays.
type KeptWorkflow struct {
	PrunedWorkflow
	// Nodes counts the nodes ("host/formula/node") it is the latest run
	// to have touched.
	Nodes  int    `json:"nodes"`
	Reason string `json:"reason"`
}

// StoreSize is a number of messages (keys, events, lines) and their bytes.
type StoreSize struct {
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
}

// WorkflowPruned is published on workflow.<id>.lifecycle once a prune has
// removed the workflow's events; the executor then removes its node
// records and output lines, the state-store its documents, and the
// planner its records. Its final state is final_status (it has no
// status: a consumer that reads it as a WorkflowEvent finds it malformed,
// never a transition).
type WorkflowPruned struct {
	Ref
	FinalStatus dag.WorkflowState `json:"final_status"`
	CreatedAt   time.Time         `json:"created_at"`
	EndedAt     time.Time         `json:"ended_at"`
	// Reason says which rule chose it ("gantry prune --keep 2",
	// "retention: older than 720h0m0s").
	Reason string `json:"reason"`
	// RequestedBy is the operator whose workflow.prune chose it (absent
	// for the retention setting).
	RequestedBy *Principal `json:"requested_by,omitempty"`
}

func (e *WorkflowPruned) EventType() Type { return TypeWorkflowPruned }

func (e *WorkflowPruned) Validate() error {
	errs := []error{e.Ref.validate(false, false)}
	if !e.FinalStatus.Terminal() {
		errs = append(errs, fmt.Errorf("final_status %q is not succeeded, failed or cancelled", e.FinalStatus))
	}
	return errors.Join(errs...)
}

// PrunedMsgID is the Nats-Msg-Id of a workflow's pruned event.
func PrunedMsgID(id string) string { return MsgID(id, "pruned") }

// Span is a time range in which a workflow's messages were published:
// from its acceptance to a while after its end.
type Span struct {
	From, Until time.Time
}

// SpanSlack is how long after a workflow's end its last messages may still
// arrive (a late output line, an event redelivered).
const SpanSlack = 10 * time.Minute

// WorkflowSpan is the span of a workflow created and ended then.
func WorkflowSpan(created, ended time.Time) Span {
	return Span{From: created.Add(-time.Minute), Until: ended.Add(SpanSlack)}
}

// WorkflowOfMessage is the workflow id a gantry message is about (its
// CloudEvents subject starts with it) and its type.
func WorkflowOfMessage(data []byte) (id string, t Type) {
	var h struct {
		Subject string `json:"subject"`
		Type    Type   `json:"type"`
	}
	if json.Unmarshal(data, &h) != nil {
		return "", ""
	}
	id, _, _ = strings.Cut(h.Subject, "/")
	return id, h.Type
}
