package dag

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Operation is what a run does with each node.
type Operation string

const (
	OpCreate Operation = "create" // run each node's `run` (default)
	OpDelete Operation = "delete" // run each node's `delete`, in reverse dependency order
	OpCheck  Operation = "check"  // run only `check` commands and report what would change
)

// OnFailure is the workflow's policy when a node fails.
type OnFailure string

const (
	OnFailureStop     OnFailure = "stop"     // nothing new starts (default)
	OnFailureContinue OnFailure = "continue" // independent branches go on
	OnFailureRollback OnFailure = "rollback" // succeeded nodes run `delete` in reverse order
)

// Transport is how the executor reaches a host.
type Transport string

const (
	TransportSSH   Transport = "ssh"   // default
	TransportLocal Transport = "local" // the executor's own machine
)

// Condition is what a formula waits for in a prerequisite.
type Condition string

const (
	ConditionCompleted Condition = "completed" // every node succeeded or was skipped
	ConditionHealthy   Condition = "healthy"   // completed and its health gate passed
)

// Defaults applied by Normalize.
const (
	DefaultNodeTimeout = 30 * time.Minute
	DefaultMaxParallel = 1
	MaxMaxParallel     = 1024
	MaxRetryAttempts   = 100
	DefaultSSHPort     = "22"
)

// MaxScript bounds a script (run, check, delete, a health gate's check)
// once rendered, with its environment once outputs are in: a host's shell
// is handed a script as one argument (sh -c), and Linux takes at most
// 128 KiB in one (MAX_ARG_STRLEN); the rest is left for what gantry wraps
// around it. Longer content goes in files:.
const MaxScript = 120 << 10

// ScriptArgSize is what text s takes of that one argument: a host's shell
// is handed it quoted once or twice (a supervisor's script holds the
// command's), and each single quote grows by 12 bytes at most ('\” once,
// quoted again).
func ScriptArgSize(s string) int { return len(s) + 12*strings.Count(s, "'") }

// ScriptWithEnvSize is what a script and its environment take of that
// argument: the script, and an export line a variable.
func ScriptWithEnvSize(script string, env map[string]string) int {
	n := ScriptArgSize(script)
	for k, v := range env {
		n += len(k) + ScriptArgSize(v) + len("export ='';\n")
	}
	return n
}

// ScriptTooLarge says why a script whose ScriptArgSize is n is refused; ""
// when it fits.
func ScriptTooLarge(n int) string {
	if n <= MaxScript {
		return ""
	}
	return fmt.Sprintf("%d bytes once quoted (a single quote counts 13), more than the %d KiB a script may be (a host's shell takes at most 128 KiB as one argument): place the rest with files:", n, MaxScript>>10)
}

// DefaultRetry is the retry policy when a composition names none: one
// attempt. Commands are not assumed to be safe to repeat.
var DefaultRetry = RetryPolicy{MaxAttempts: 1, InitialInterval: Duration(2 * time.Second), MaxInterval: Duration(time.Minute), Multiplier: 2}

// Composition is a v1 composition document. Field names are the same in
// YAML and JSON.
type Composition struct {
	Name      string          `json:"name"`
	Operation Operation       `json:"operation,omitempty"`
	Hosts     map[string]Host `json:"hosts"`
	Formulas  []Formula       `json:"formulas"`
	Retry     *RetryPolicy    `json:"retry,omitempty"`
	OnFailure OnFailure       `json:"on_failure,omitempty"`
	Targets   []string        `json:"targets,omitempty"`
	Reset     bool            `json:"reset,omitempty"`
	// Rerun names nodes ("formula/node") that a create runs even though
	// the composition has them in place with the same spec: they are not
	// skipped as already done when the workflow is accepted (their own
	// check still runs first: exit 0 skips them). A group formula's name
	// stands for each of its instances. gantry reconcile sets it for the
	// nodes whose host says they changed. Create only.
	Rerun []string `json:"rerun,omitempty"`
	// Timeout bounds the whole run, counted from its acceptance (and
	// from each retry): past it, what has not finished is stopped (killed
	// on the hosts, or never started) and the workflow fails with the
	// reason deadline. 0: no bound.
	Timeout Duration `json:"timeout,omitempty"`
	// Diff, with operation check, carries a unified diff of each file
	// that would change in the node events (gantry submit --check --diff).
	Diff bool `json:"diff,omitempty"`

	// Fleets (see fleet.go): variables every host's templates see, groups
	// of hosts that formulas fan out over, the inventory file that stands
	// in for hosts and groups (read by the CLI, never sent), the run's
	// priority, and limits on nodes running at once across executors.
	Vars map[string]string `json:"vars,omitempty"`
	// ExtraVars are the vars given on the command line (gantry's --var
	// and --var-file): over the composition's and every host's own (see
	// extravars.go). The submitted composition carries them, so the
	// workflow's record keeps what its commands were rendered with.
	ExtraVars map[string]string `json:"extra_vars,omitempty"`
	Groups    map[string]Group  `json:"groups,omitempty"`
	Inventory string            `json:"inventory,omitempty"`
	Priority  int               `json:"priority,omitempty"`
	Limits    []Limit           `json:"limits,omitempty"`
}

// Group is a set of hosts: those whose labels include every one of Labels,
// or those listed in Hosts.
type Group struct {
	Labels map[string]string `json:"labels,omitempty"`
	Hosts  []string          `json:"hosts,omitempty"`
}

// Limit caps the nodes running at once, across all executors, on the hosts
// whose labels include every one of Labels (or of a group).
type Limit struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Group       string            `json:"group,omitempty"`
	MaxParallel int               `json:"max_parallel"`
}

// Rollout runs a fanned-out formula's instances in batches.
type Rollout struct {
	Batch     Amount `json:"batch"`                // instances per batch
	MaxFailed Amount `json:"max_failed,omitempty"` // failed instances allowed before no new batch starts
}

// Amount is a count, or a percentage of a whole ("25%").
type Amount struct {
	N       int  `json:"-"`
	Percent bool `json:"-"`
}

// Host is a machine formulas run on.
type Host struct {
	Address   string    `json:"address,omitempty"` // host or host:port; ssh only
	User      string    `json:"user,omitempty"`    // ssh login; the executor's default when empty
	Transport Transport `json:"transport,omitempty"`
	// Via is the jump host this host is reached through (ssh ProxyJump);
	// jump hosts may have their own.
	Via    string            `json:"via,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Vars   map[string]string `json:"vars,omitempty"` // over the composition's vars
	// TypedVars names the vars that hold a typed value as JSON text (a
	// list, a mapping, a number or a boolean of an inventory): templates
	// see them decoded (.Vars.ntp is a list), the others as text.
	TypedVars   []string `json:"typed_vars,omitempty"`
	MaxParallel int      `json:"max_parallel,omitempty"` // nodes at once on it; 0: the executor's --per-host
	// Become runs the commands on the host (its nodes', its health
	// gates') through sudo -n, as BecomeUser (root when empty); formulas
	// and nodes may say otherwise (see Normalize). ssh only.
	Become     bool   `json:"become,omitempty"`
	BecomeUser string `json:"become_user,omitempty"`
	// IdentityFile is the private key the worker offers this host (an
	// absolute path on the worker, or one under its home: ~/...) instead
	// of its own key; KEY-cert.pub beside it is offered as a user
	// certificate. Only the path travels. ssh only.
	IdentityFile string `json:"identity_file,omitempty"`
}

// Formula is an ordered set of nodes for one server.
type Formula struct {
	ID     string `json:"id"`
	Server string `json:"server"`
	// Group, instead of Server, fans the formula out: one instance per host
	// of the group, each a formula of its own (see fleet.go).
	Group   string   `json:"group,omitempty"`
	Rollout *Rollout `json:"rollout,omitempty"`
	// Instance says, on a formula made by fanning out, which formula and
	// batch it is an instance of.
	Instance    *Instance    `json:"instance,omitempty"`
	MaxParallel int          `json:"max_parallel,omitempty"`
	DependsOn   []FormulaDep `json:"depends_on,omitempty"`
	Nodes       []Node       `json:"nodes"`
	HealthGate  *HealthGate  `json:"health_gate,omitempty"`
	// Timeout bounds the formula's nodes, counted from its dispatch (when
	// it is ready): past it, those not finished are stopped on the host
	// and the formula fails with the reason deadline, after which the
	// run's on_failure applies. Its health gate has a timeout of its own.
	// 0: no bound. Each instance of a group formula has its own.
	Timeout Duration `json:"timeout,omitempty"`
	// Become and BecomeUser are the host's for this formula's nodes and
	// health gate (nil, "": the host's); Normalize sets them to what
	// applies when that is to become.
	Become     *bool  `json:"become,omitempty"`
	BecomeUser string `json:"become_user,omitempty"`
}

// Instance is a fanned-out formula's instance: of formula Of (its id in
// the composition as written), for one host of its group, in rollout
// batch Batch (0 when there is no rollout).
type Instance struct {
	Of        string `json:"of"`
	Batch     int    `json:"batch,omitempty"`
	Batches   int    `json:"batches,omitempty"`
	MaxFailed int    `json:"max_failed,omitempty"` // failed instances of Of allowed
}

// FormulaDep is one prerequisite of a formula.
type FormulaDep struct {
	Formula   string    `json:"formula"`
	Condition Condition `json:"condition,omitempty"`
}

// Node is one command (with its check and delete) on the formula's server.
type Node struct {
	Name      string              `json:"name"`
	Run       string              `json:"run,omitempty"`
	Check     string              `json:"check,omitempty"`
	Delete    string              `json:"delete,omitempty"`
	DependsOn []string            `json:"depends_on"`
	Timeout   Duration            `json:"timeout,omitempty"`
	Env       map[string]EnvValue `json:"env,omitempty"`
	Retry     *RetryPolicy        `json:"retry,omitempty"`
	// Become and BecomeUser are the formula's for this node (nil, "":
	// the formula's); Normalize sets them to what applies when that is to
	// become. They count in its SpecHash then.
	Become     *bool  `json:"become,omitempty"`
	BecomeUser string `json:"become_user,omitempty"`
	// Files are placed on the host before the node's run (create), or
	// compared with what is there (check); see files.go. A node with files
	// needs no run.
	Files []File `json:"files,omitempty"`
	// Outputs are the values its run hands to later nodes and formulas,
	// written to $GANTRY_OUTPUT and read with {{ output }} (outputs.go).
	Outputs []Output `json:"outputs,omitempty"`

	// dependsOnSet records whether depends_on was given at all: an absent
	// depends_on under max_parallel 1 means "the previous node", an empty
	// one means "nothing".
	dependsOnSet bool
}

// HealthGate is the check that must pass after a formula completes before
// formulas that wait for it as `healthy` may start.
type HealthGate struct {
	Check   string              `json:"check"`
	Timeout Duration            `json:"timeout"`
	Retries int                 `json:"retries"`
	Env     map[string]EnvValue `json:"env,omitempty"`
}

// RetryPolicy is exponential backoff between the attempts of a node.
type RetryPolicy struct {
	MaxAttempts     int      `json:"max_attempts"`
	InitialInterval Duration `json:"initial_interval"`
	MaxInterval     Duration `json:"max_interval"`
	Multiplier      float64  `json:"multiplier"`
}

// Duration is a time.Duration written as a Go duration string ("90s", "10m").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"90s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}
