package events

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// The states of DESIGN.md, as typed string enums (defined in pkg/dag, which
// steps runs by them).
type (
	WorkflowState = dag.WorkflowState
	FormulaState  = dag.FormulaState
	NodeState     = dag.NodeState
	Operation     = dag.Operation
)

// HealthStatus is the verdict of one health-gate check.
type HealthStatus string

const (
	HealthPass HealthStatus = "pass"
	HealthFail HealthStatus = "fail"
)

// CheckResult is what operation check found for a node.
type CheckResult string

const (
	CheckOK          CheckResult = "ok"           // check exited 0: nothing would change
	CheckWouldChange CheckResult = "would_change" // check failed or is missing: run would do something
)

// Stream names an output stream of a command.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Size bounds of text carried in events.
const (
	MaxErrorBytes = 2048 // error messages: the start is kept
	MaxTailBytes  = 4096 // output tails: the end is kept
	MaxLineBytes  = 4096 // one log line
)

// Ref says what an event is about. Every payload carries it, with the
// fields that do not apply left empty (a workflow event has no node).
type Ref struct {
	WorkflowID string    `json:"workflow_id"`
	Workflow   string    `json:"workflow"`
	Formula    string    `json:"formula"`
	Host       string    `json:"host"`
	Node       string    `json:"node"`
	Operation  Operation `json:"operation"`
	// Generation counts runs of the workflow: 1, then +1 for each retry.
	// Events of an older generation are history, not news.
	Generation int `json:"generation"`
}

// Run is the timing and result of an attempt.
type Run struct {
	Attempt   int        `json:"attempt"`
	StartedAt *time.Time `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	ExitCode  *int       `json:"exit_code"`
	Error     string     `json:"error"`
}

// WorkflowEvent is published on workflow.<id>.lifecycle.
type WorkflowEvent struct {
	Ref
	Status WorkflowState `json:"status"`
	Run
	// Counts of formulas by state when the event was published, and the
	// size of the plan.
	Formulas   map[FormulaState]int `json:"formulas,omitempty"`
	TotalNodes int                  `json:"total_nodes,omitempty"`
	Reason     string               `json:"reason,omitempty"` // why paused, cancelled or failed
	// RequestedBy is who asked for this transition (the submit for
	// accepted; cancel, pause, resume, retry), as the server
	// authenticated them; absent for the planner's own transitions.
	RequestedBy *Principal `json:"requested_by,omitempty"`
	// Cancelling, on a running workflow, says a cancel was requested (or,
	// with no RequestedBy and a Reason starting ReasonDeadline and ":",
	// the composition's timeout passed) and its formulas still running
	// are being stopped (executors kill them); the workflow is cancelled
	// (failed, for the deadline) once they have ended.
	Cancelling bool `json:"cancelling,omitempty"`
	// Stopping, on a running workflow, names formulas whose timeout has
	// passed while they ran: executors kill what of them still runs and
	// report each failed, with the reason deadline. The rest of the run
	// goes on (its on_failure applies to those failures).
	Stopping []string `json:"stopping,omitempty"`
	// Graph, on accepted only, is the run's DAG without commands (absent
	// for a plan too large; see Graph).
	Graph *Graph `json:"graph,omitempty"`
	// Vars, on accepted only, are the composition's extra vars (--var,
	// --var-file) as dag.ShownVars shows them: a secret-looking name's
	// value is "***".
	Vars map[string]string `json:"vars,omitempty"`
}

// ReasonDeadline starts the reason of what the composition's or a
// formula's timeout ended ("deadline: the composition's timeout of 5m
// passed ..."): the reason the contract names.
const ReasonDeadline = "deadline"

// FormulaEvent is published on decky.<host>.lifecycle.
type FormulaEvent struct {
	Ref
	Status FormulaState `json:"status"`
	Run
	Blocker string `json:"blocker,omitempty"` // the failed formula behind blocked or cancelled
}

// NodeEvent is published on decky.<host>.lifecycle.
type NodeEvent struct {
	Ref
	Status NodeState `json:"status"`
	Run
	MaxAttempts int `json:"max_attempts,omitempty"`
	// GenAttempt is the attempt's number within its run generation (a
	// workflow retry starts again at 1): the count MaxAttempts bounds.
	// Attempt counts every generation's.
	GenAttempt int         `json:"gen_attempt,omitempty"`
	SpecHash   string      `json:"spec_hash,omitempty"`
	Blocker    string      `json:"blocker,omitempty"` // the failed node behind blocked
	Actor      string      `json:"actor,omitempty"`   // the executor instance that ran it
	Check      CheckResult `json:"check,omitempty"`   // operation check only
	// Unreachable, on a failed attempt, says its host could not be
	// reached or trusted (no connection or no answer in time, its host key
	// or the credentials refused): nothing of the attempt ran there.
	Unreachable bool   `json:"unreachable,omitempty"`
	Reason      string `json:"reason,omitempty"`     // why skipped or cancelled
	WillRetry   bool   `json:"will_retry,omitempty"` // failed, but another attempt follows
	// NotStarted says the attempt started nothing on its host: on a
	// running, it waits for a slot; on its end, it ended before anything
	// started (cancelled while it waited, its host unreachable). What an
	// earlier create put in place is left as it was.
	NotStarted bool   `json:"not_started,omitempty"`
	StdoutTail string `json:"stdout_tail,omitempty"`
	StderrTail string `json:"stderr_tail,omitempty"`
	// Files are the node's files as its attempt found (and, in a create,
	// left) them, on its final event: never their content.
	Files []FileResult `json:"files,omitempty"`
	// Outputs are the values a succeeded node handed on, but the secret
	// ones, whose names only are in SecretOutputs.
	Outputs       map[string]string `json:"outputs,omitempty"`
	SecretOutputs []string          `json:"secret_outputs,omitempty"`
}

// FileStatus is what an attempt did to (create) or found of (check) a
// file of its node.
type FileStatus string

const (
	FileChanged   FileStatus = "changed"   // written or fixed (check: would be)
	FileUnchanged FileStatus = "unchanged" // in place: not touched
)

// Bounds of what node events say of files.
const (
	MaxFileDiffBytes  = 4096     // one file's diff (operation check with diff)
	MaxFilesDiffBytes = 64 << 10 // all of one event's diffs
)

// FileResult is one file of a node, as an attempt found (and left) it.
type FileResult struct {
	Path   string     `json:"path"`
	Status FileStatus `json:"status"`
	// SHA256 is the hex SHA-256 of the content wanted (and, unless
	// failed, placed); none for a secret file.
	SHA256 string `json:"sha256,omitempty"`
	// Differs says what differed: missing, type, content, mode, owner,
	// group.
	Differs []string `json:"differs,omitempty"`
	// Diff, in an operation check with diff, is a unified diff of the
	// host's file into the one wanted, bounded (MaxFileDiffBytes); a
	// secret's says only "content differs".
	Diff string `json:"diff,omitempty"`
	// Error says why the file could not be placed or compared.
	Error string `json:"error,omitempty"`
}

// RolloutEvent is published on workflow.<id>.lifecycle when a batch of a
// rollout starts or finishes, and when the rollout stops. Formula is the
// group formula as written (its instances are "<formula>-<host>").
type RolloutEvent struct {
	Ref
	Status    RolloutStatus `json:"status"`
	Batch     int           `json:"batch"`   // from 1
	Batches   int           `json:"batches"` // in all
	Instances []string      `json:"instances"`
	Failed    int           `json:"failed"` // instances of the rollout failed so far
	MaxFailed int           `json:"max_failed"`
	Reason    string        `json:"reason,omitempty"`
	At        *time.Time    `json:"at"`
}

// RolloutStatus is what happened to a rollout.
type RolloutStatus string

const (
	RolloutBatchStarted  RolloutStatus = "batch_started"
	RolloutBatchFinished RolloutStatus = "batch_finished"
	RolloutStopped       RolloutStatus = "stopped"
)

// HealthEvent is published on decky.<host>.health for every check attempt
// and for the final verdict.
type HealthEvent struct {
	Ref
	Status HealthStatus `json:"status"`
	Run
	Final      bool   `json:"final"`
	Retries    int    `json:"retries"`
	OutputTail string `json:"output_tail,omitempty"`
}

// LogLine is one line of a node's output, on decky.<host>.logs.<node>.
type LogLine struct {
	Ref
	Attempt int    `json:"attempt"`
	Stream  Stream `json:"stream"`
	Seq     int64  `json:"seq"` // per node attempt, from 1
	Line    string `json:"line"`
}

// ProgressEvent is published on decky.<host>.lifecycle when a running
// node's attempt prints a line "PROGRESS: n" (n 0-100) on its stdout with a
// percent other than the last one published (at most a few a second).
type ProgressEvent struct {
	Ref
	Attempt int `json:"attempt"`
	Percent int `json:"percent"` // 0-100
}

// HostSpec is how an executor or health-gate worker reaches a host.
type HostSpec struct {
	Transport dag.Transport `json:"transport"`
	Address   string        `json:"address,omitempty"`
	User      string        `json:"user,omitempty"`
	// IdentityFile is the path of the key the worker offers the host
	// (on the worker; never the key itself); the worker's own when empty.
	IdentityFile string `json:"identity_file,omitempty"`
	// Via is the jump hosts the host is reached through (ssh ProxyJump),
	// the first hop first.
	Via []Jump `json:"via,omitempty"`
}

// Jump is one jump host on the way to a host.
type Jump struct {
	Address      string `json:"address"`                 // host:port
	User         string `json:"user,omitempty"`          // the worker's default when empty
	IdentityFile string `json:"identity_file,omitempty"` // as HostSpec's
}

// WorkNode is one node of a dispatched formula.
type WorkNode struct {
	Name        string                  `json:"name"`
	Command     string                  `json:"command"`         // what the operation runs
	Check       string                  `json:"check,omitempty"` // create: exit 0 means skip
	DependsOn   []string                `json:"depends_on,omitempty"`
	Timeout     dag.Duration            `json:"timeout"`
	Env         map[string]dag.EnvValue `json:"env,omitempty"` // secrets by name only
	Retry       dag.RetryPolicy         `json:"retry"`
	SpecHash    string                  `json:"spec_hash"`
	AlreadyDone bool                    `json:"already_done,omitempty"` // recorded succeeded with this spec: skip
	// NotRetried: a retry limited to other nodes leaves this one as it
	// was; it does not run in this generation.
	NotRetried bool `json:"not_retried,omitempty"`
	// Become runs its scripts through sudo -n on the host, as BecomeUser
	// (root when empty).
	Become     bool   `json:"become,omitempty"`
	BecomeUser string `json:"become_user,omitempty"`
	// Files are placed before Command runs (create), or compared with
	// the host's (check).
	Files []WorkFile `json:"files,omitempty"`
	// Outputs are the values its run writes to $GANTRY_OUTPUT (create
	// only), which the executor keeps in gantry_outputs once it succeeds.
	Outputs []dag.Output `json:"outputs,omitempty"`
}

// WorkFile is one file of a dispatched node. An inline file carries its
// content (a template rendered for the host); a source or secret file
// only the name the executor reads it by.
type WorkFile struct {
	Path    string       `json:"path"`
	Kind    WorkFileKind `json:"kind"`
	Content []byte       `json:"content,omitempty"` // inline
	Source  string       `json:"source,omitempty"`  // under the executor's --files-dir
	Secret  string       `json:"secret,omitempty"`  // in the executor's --secrets-dir
	Mode    string       `json:"mode,omitempty"`
	Owner   string       `json:"owner,omitempty"`
	Group   string       `json:"group,omitempty"`
	Mkdir   bool         `json:"mkdir,omitempty"`
}

// WorkFileKind says where a dispatched file's content comes from.
type WorkFileKind string

const (
	FileInline WorkFileKind = "inline"
	FileSource WorkFileKind = "source"
	FileSecret WorkFileKind = "secret"
)

func (f *WorkFile) validate() error {
	var errs []error
	if p := dag.FilePathProblem(f.Path); p != "" {
		errs = append(errs, errors.New(p))
	}
	switch f.Kind {
	case FileInline:
	case FileSource:
		if p := dag.SourceProblem(f.Source); p != "" || f.Source == "" {
			errs = append(errs, fmt.Errorf("source %q: %s", f.Source, p))
		}
	case FileSecret:
		if p := dag.SecretNameProblem(f.Secret); p != "" {
			errs = append(errs, errors.New(p))
		}
	default:
		errs = append(errs, fmt.Errorf("kind %q is not inline, source or secret", f.Kind))
	}
	if f.Mode != "" {
		if _, err := dag.ParseMode(f.Mode); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// WorkFiles are the dispatched form of a node's files.
func WorkFiles(files []dag.File) []WorkFile {
	if len(files) == 0 {
		return nil
	}
	out := make([]WorkFile, len(files))
	for i := range files {
		f := &files[i]
		w := WorkFile{Path: f.Path, Mode: f.Mode, Owner: f.Owner, Group: f.Group, Mkdir: f.Mkdir}
		switch {
		case f.Inline():
			w.Kind, w.Content = FileInline, []byte(f.Text())
		case f.Source != "":
			w.Kind, w.Source = FileSource, f.Source
		default:
			w.Kind, w.Secret = FileSecret, f.Secret
		}
		out[i] = w
	}
	return out
}

// Dispatch is formula-ready work on decky.<host>.dispatch.<zone>:
// everything an executor needs to run the formula, so executors keep no
// state.
type Dispatch struct {
	Ref
	Host        HostSpec      `json:"host_spec"`
	MaxParallel int           `json:"max_parallel"`
	OnFailure   dag.OnFailure `json:"on_failure"`
	Nodes       []WorkNode    `json:"nodes"`
	Order       []string      `json:"order"`
	// Limits are what each node takes a slot of, across executors, while
	// an attempt runs (the host's own first by ID order; see
	// dag.Composition.HostLimits); Priority (1-100) orders the nodes
	// waiting for a slot. Both are absent in dispatches of older planners:
	// the host's own limit with --per-host, and dag.DefaultPriority.
	Limits   []dag.SlotLimit `json:"limits,omitempty"`
	Priority int             `json:"priority,omitempty"`
	// SkipAtTurnAfter, on a create, has its nodes that are not already
	// done skipped at their turn on the host (once the attempt holds the
	// host lock, before it starts) when another workflow's create of the
	// same node there succeeded with the same spec hash and is recorded in
	// gantry_nodes at a revision after this one. It is the revision of
	// gantry_nodes up to which the planner had read the node records when
	// it decided what is already done: a success recorded by then was
	// known, and is not skipped again at the turn. Absent: nothing is
	// skipped at the turn (reset: true, another operation, or a planner
	// from before).
	SkipAtTurnAfter *uint64 `json:"skip_at_turn_after,omitempty"`
	// Timeout is the formula's (0: none). The planner keeps the time and
	// says when it has passed (WorkflowEvent.Stopping, RunSnapshot.Expired);
	// the executor names it in the failure it reports.
	Timeout dag.Duration `json:"timeout,omitempty"`
	// Diff, in an operation check, asks for a diff of each file that
	// would change (FileResult.Diff).
	Diff bool `json:"diff,omitempty"`
}

// GateRequest is health-gate work on decky.<host>.gate.
type GateRequest struct {
	Ref
	Host HostSpec       `json:"host_spec"`
	Gate dag.HealthGate `json:"gate"`
	// Become runs the check through sudo -n on the host, as BecomeUser
	// (root when empty): the formula's.
	Become     bool   `json:"become,omitempty"`
	BecomeUser string `json:"become_user,omitempty"`
}

// EventType implementations.
func (e *WorkflowEvent) EventType() Type { return WorkflowType(e.Status) }
func (e *FormulaEvent) EventType() Type  { return FormulaType(e.Status) }
func (e *NodeEvent) EventType() Type     { return NodeType(e.Status) }
func (e *HealthEvent) EventType() Type {
	switch {
	case !e.Final:
		return TypeHealthAttempt
	case e.Status == HealthPass:
		return TypeHealthPassed
	}
	return TypeHealthFailed
}
func (e *LogLine) EventType() Type       { return TypeLogLine }
func (e *ProgressEvent) EventType() Type { return TypeProgressUpdate }
func (e *RolloutEvent) EventType() Type {
	return Type(typePrefix + FamilyRollout + "." + string(e.Status))
}
func (e *Dispatch) EventType() Type    { return TypeDispatch }
func (e *GateRequest) EventType() Type { return TypeGateRequest }

// EventSubject implementations: "<workflow_id>/<formula>/<node>" as far as
// it applies.
func (r *Ref) EventSubject() string {
	s := r.WorkflowID
	if r.Formula != "" {
		s += "/" + r.Formula
	}
	if r.Node != "" {
		s += "/" + r.Node
	}
	return s
}

var errMissing = errors.New("missing")

func (r *Ref) validate(needFormula, needNode bool) error {
	var errs []error
	check := func(name, v string, need bool) {
		ok, what := dag.IsToken, "token"
		if name == "host" {
			ok, what = dag.IsHostName, "host name"
		}
		switch {
		case need && v == "":
			errs = append(errs, fmt.Errorf("%s: %w", name, errMissing))
		case v != "" && !ok(v):
			errs = append(errs, fmt.Errorf("%s %q is not a %s", name, v, what))
		}
	}
	check("workflow_id", r.WorkflowID, true)
	check("workflow", r.Workflow, true)
	check("formula", r.Formula, needFormula)
	check("host", r.Host, needFormula)
	check("node", r.Node, needNode)
	switch r.Operation {
	case dag.OpCreate, dag.OpDelete, dag.OpCheck:
	default:
		errs = append(errs, fmt.Errorf("operation %q is not create, delete or check", r.Operation))
	}
	return errors.Join(errs...)
}

func (e *WorkflowEvent) Validate() error {
	errs := []error{e.Ref.validate(false, false), validState("status", e.Status.Valid(), string(e.Status))}
	for i, f := range e.Stopping {
		if !dag.IsToken(f) {
			errs = append(errs, fmt.Errorf("stopping[%d] %q is not a token", i, f))
		}
	}
	return errors.Join(errs...)
}

func (e *FormulaEvent) Validate() error {
	return errors.Join(e.Ref.validate(true, false), validState("status", e.Status.Valid(), string(e.Status)))
}

func (e *NodeEvent) Validate() error {
	return errors.Join(e.Ref.validate(true, true), validState("status", e.Status.Valid(), string(e.Status)),
		nonNegative("attempt", e.Attempt))
}

func (e *HealthEvent) Validate() error {
	return errors.Join(e.Ref.validate(true, false),
		validState("status", e.Status == HealthPass || e.Status == HealthFail, string(e.Status)),
		nonNegative("attempt", e.Attempt))
}

func (e *LogLine) Validate() error {
	return errors.Join(e.Ref.validate(true, true),
		validState("stream", e.Stream == Stdout || e.Stream == Stderr, string(e.Stream)))
}

func (e *ProgressEvent) Validate() error {
	errs := []error{e.Ref.validate(true, true), nonNegative("attempt", e.Attempt)}
	if e.Percent < 0 || e.Percent > 100 {
		errs = append(errs, fmt.Errorf("percent %d is not within 0-100", e.Percent))
	}
	return errors.Join(errs...)
}

func (e *RolloutEvent) Validate() error {
	errs := []error{e.Ref.validate(false, false),
		validState("status", e.Status == RolloutBatchStarted || e.Status == RolloutBatchFinished || e.Status == RolloutStopped, string(e.Status))}
	if !dag.IsToken(e.Formula) {
		errs = append(errs, fmt.Errorf("formula %q is not a token", e.Formula))
	}
	if e.Batch < 1 || e.Batch > e.Batches {
		errs = append(errs, fmt.Errorf("batch %d is not within 1-%d", e.Batch, e.Batches))
	}
	return errors.Join(errs...)
}

func (e *Dispatch) Validate() error {
	errs := []error{e.Ref.validate(true, false), e.Host.validate()}
	if len(e.Nodes) == 0 {
		errs = append(errs, fmt.Errorf("nodes: %w", errMissing))
	}
	if e.MaxParallel < 1 {
		errs = append(errs, fmt.Errorf("max_parallel %d is below 1", e.MaxParallel))
	}
	names := make(map[string]bool, len(e.Nodes))
	for i, n := range e.Nodes {
		if !dag.IsToken(n.Name) {
			errs = append(errs, fmt.Errorf("nodes[%d].name %q is not a token", i, n.Name))
		}
		if names[n.Name] {
			errs = append(errs, fmt.Errorf("nodes[%d].name %q: a second node of that name", i, n.Name))
		}
		names[n.Name] = true
		for k := range n.Files {
			if err := n.Files[k].validate(); err != nil {
				errs = append(errs, fmt.Errorf("nodes[%d].files[%d]: %w", i, k, err))
			}
		}
	}
	for i, n := range e.Nodes {
		for _, d := range n.DependsOn {
			if !names[d] {
				errs = append(errs, fmt.Errorf("nodes[%d].depends_on: unknown node %q", i, d))
			}
		}
	}
	ordered := make(map[string]bool, len(e.Order))
	for _, o := range e.Order {
		switch {
		case !names[o]:
			errs = append(errs, fmt.Errorf("order: unknown node %q", o))
		case ordered[o]:
			errs = append(errs, fmt.Errorf("order: node %q named twice", o))
		}
		ordered[o] = true
	}
	if len(e.Order) != len(e.Nodes) {
		errs = append(errs, fmt.Errorf("order names %d nodes, want %d", len(e.Order), len(e.Nodes)))
	}
	errs = append(errs, validLimits(e.Limits, e.Priority))
	if e.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %s is negative", e.Timeout))
	}
	return errors.Join(errs...)
}

func (e *GateRequest) Validate() error {
	errs := []error{e.Ref.validate(true, false), e.Host.validate()}
	if e.Gate.Check == "" || e.Gate.Timeout <= 0 || e.Gate.Retries < 1 {
		errs = append(errs, errors.New("gate needs a check, a timeout and retries"))
	}
	return errors.Join(errs...)
}

func (h *HostSpec) validate() error {
	switch h.Transport {
	case dag.TransportLocal:
		if len(h.Via) > 0 {
			return errors.New("host_spec.via: transport local has no jump hosts")
		}
		return nil
	case dag.TransportSSH:
		if h.Address == "" {
			return fmt.Errorf("host_spec.address: %w", errMissing)
		}
		for i, j := range h.Via {
			if j.Address == "" {
				return fmt.Errorf("host_spec.via[%d].address: %w", i, errMissing)
			}
		}
		return nil
	}
	return fmt.Errorf("host_spec.transport %q is not ssh or local", h.Transport)
}

func validState(name string, ok bool, v string) error {
	if ok {
		return nil
	}
	return fmt.Errorf("%s %q is not a known state", name, v)
}

func nonNegative(name string, v int) error {
	if v < 0 {
		return fmt.Errorf("%s %d is negative", name, v)
	}
	return nil
}

// BoundError keeps the start of an error message, at most MaxErrorBytes,
// cut on a UTF-8 boundary, saying how much was dropped.
func BoundError(s string) string {
	if len(s) <= MaxErrorBytes {
		return s
	}
	cut := MaxErrorBytes - 32
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes cut)", s[:cut], len(s)-cut)
}

// BoundTail keeps the end of an output, at most max bytes, cut on a UTF-8
// boundary.
func BoundTail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := len(s) - max
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return s[cut:]
}
