package events

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Request/reply subjects (NATS micro endpoints).
const (
	SubjectSubmit   = "workflow.submit"
	SubjectValidate = "workflow.validate"
	// SubjectPrune asks the planner to remove finished workflows (operators
	// only): PruneRequest, answered with a PruneReply.
	SubjectPrune  = "workflow.prune"
	StateWorkflow = "state.workflow"
	StateList     = "state.list"
	StateHost     = "state.host"
	StateDrift    = "state.drift"
	StateRebuild  = "state.rebuild"
)

// StateReads are the state-store's reads: idempotent, and asked again
// when not answered in time (StateRetry).
var StateReads = []string{StateWorkflow, StateList, StateHost, StateDrift}

// StateRetry is the subject a state read is asked again on
// (state.retry.workflow for state.workflow), "" for any other subject.
// Every state-store replica answers it (no queue group) and the first
// answer wins: a replica that cannot answer (stopped, cut off, its
// JetStream gone) does not keep the read from being answered, as it
// would if the queue group picked it again.
func StateRetry(subject string) string {
	if !slices.Contains(StateReads, subject) {
		return ""
	}
	return "state.retry." + strings.TrimPrefix(subject, "state.")
}

// Control verbs on workflow.<id>.<verb>.
const (
	VerbCancel = "cancel"
	VerbPause  = "pause"
	VerbResume = "resume"
	VerbRetry  = "retry"
)

// Wildcards for subscribers and stream filters.
const (
	AllWorkflowLifecycle = "workflow.*.lifecycle"
	AllHostLifecycle     = "decky.*.lifecycle"
	AllDispatch          = "decky.*.dispatch.*"
	AllGate              = "decky.*.gate"
	AllHealth            = "decky.*.health"
	AllLogs              = "decky.*.logs.*"
)

// WorkflowLifecycle is workflow.<id>.lifecycle.
func WorkflowLifecycle(id string) string { return "workflow." + id + ".lifecycle" }

// WorkflowControl is workflow.<id>.<verb> for cancel, pause, resume, retry.
func WorkflowControl(id, verb string) string { return "workflow." + id + "." + verb }

// Every decky.<host>... subject carries the host's host token
// (dag.HostToken: its name with each '.' written '_', as in
// decky.10_0_0_5.lifecycle), never the name itself, which may have dots.
// The builders below take the host's name (or "*") and write its token;
// the payload keeps the name.

// HostLifecycle is decky.<host token>.lifecycle.
func HostLifecycle(host string) string { return "decky." + dag.HostToken(host) + ".lifecycle" }

// NoZone is the zone token of the dispatch subject of a host without a
// zone label.
const NoZone = "_"

// HostDispatch is decky.<host token>.dispatch.<zone>: the host's zone
// label, or NoZone.
func HostDispatch(host, zone string) string {
	return "decky." + dag.HostToken(host) + ".dispatch." + zoneToken(zone)
}

// ZoneDispatch is decky.*.dispatch.<zone>: the work of every host of the
// zone ("" for hosts without one), what the executors of a zone consume.
func ZoneDispatch(zone string) string { return "decky.*.dispatch." + zoneToken(zone) }

func zoneToken(zone string) string {
	if zone == "" {
		return NoZone
	}
	return zone
}

// HostGate is decky.<host token>.gate.
func HostGate(host string) string { return "decky." + dag.HostToken(host) + ".gate" }

// HostHealth is decky.<host token>.health.
func HostHealth(host string) string { return "decky." + dag.HostToken(host) + ".health" }

// HostLogs is decky.<host token>.logs.<node>.
func HostLogs(host, node string) string { return "decky." + dag.HostToken(host) + ".logs." + node }

// Kind classifies a parsed subject.
type Kind string

const (
	KindSubmit            Kind = "submit"
	KindValidate          Kind = "validate"
	KindPrune             Kind = "prune"
	KindWorkflowLifecycle Kind = "workflow_lifecycle"
	KindWorkflowControl   Kind = "workflow_control"
	KindHostLifecycle     Kind = "host_lifecycle"
	KindDispatch          Kind = "dispatch"
	KindGate              Kind = "gate"
	KindHealth            Kind = "health"
	KindLogs              Kind = "logs"
	KindState             Kind = "state"
	KindStatus            Kind = "status"
)

// Subject is a parsed subject.
type Subject struct {
	Kind       Kind
	WorkflowID string // workflow.<id>...
	Verb       string // cancel, pause, resume, retry; the state endpoint; or the service of a status
	Host       string // decky.<host>...: the host token (dag.HostToken), not the name
	Node       string // decky.<host>.logs.<node>
	Zone       string // decky.<host>.dispatch.<zone> ("" for NoZone)
}

// ErrBadSubject is wrapped by every ParseSubject error.
var ErrBadSubject = errors.New("bad subject")

// ParseSubject recognises every gantry subject and checks its tokens.
func ParseSubject(s string) (Subject, error) {
	parts := strings.Split(s, ".")
	bad := func(format string, args ...any) (Subject, error) {
		return Subject{}, fmt.Errorf("%w %q: %s", ErrBadSubject, s, fmt.Sprintf(format, args...))
	}
	token := func(name, v string) error {
		if !dag.IsToken(v) {
			return fmt.Errorf("%s %q is not a token", name, v)
		}
		return nil
	}
	switch parts[0] {
	case "workflow":
		switch {
		case s == SubjectSubmit:
			return Subject{Kind: KindSubmit}, nil
		case s == SubjectValidate:
			return Subject{Kind: KindValidate}, nil
		case s == SubjectPrune:
			return Subject{Kind: KindPrune}, nil
		case len(parts) != 3:
			return bad("want workflow.<id>.<verb>")
		}
		if err := token("workflow id", parts[1]); err != nil {
			return bad("%v", err)
		}
		switch parts[2] {
		case "lifecycle":
			return Subject{Kind: KindWorkflowLifecycle, WorkflowID: parts[1]}, nil
		case VerbCancel, VerbPause, VerbResume, VerbRetry:
			return Subject{Kind: KindWorkflowControl, WorkflowID: parts[1], Verb: parts[2]}, nil
		}
		return bad("unknown verb %q", parts[2])
	case "decky":
		if len(parts) < 3 {
			return bad("want decky.<host>.<kind>")
		}
		if !dag.IsHostToken(parts[1]) {
			return bad("host token %q is not a host name without dots", parts[1])
		}
		sub := Subject{Host: parts[1]}
		switch {
		case parts[2] == "lifecycle" && len(parts) == 3:
			sub.Kind = KindHostLifecycle
		case parts[2] == "dispatch" && len(parts) == 4:
			if parts[3] != NoZone {
				if err := token("zone", parts[3]); err != nil {
					return bad("%v", err)
				}
				sub.Zone = parts[3]
			}
			sub.Kind = KindDispatch
		case parts[2] == "gate" && len(parts) == 3:
			sub.Kind = KindGate
		case parts[2] == "health" && len(parts) == 3:
			sub.Kind = KindHealth
		case parts[2] == "logs" && len(parts) == 4:
			if err := token("node", parts[3]); err != nil {
				return bad("%v", err)
			}
			sub.Kind, sub.Node = KindLogs, parts[3]
		default:
			return bad("unknown host subject")
		}
		return sub, nil
	case "state":
		if len(parts) == 2 {
			switch s {
			case StateWorkflow, StateList, StateHost, StateDrift, StateRebuild:
				return Subject{Kind: KindState, Verb: parts[1]}, nil
			}
		}
		return bad("unknown state endpoint")
	case "status":
		for _, id := range Services {
			if s == StatusSubject(id) {
				return Subject{Kind: KindStatus, Verb: string(id)}, nil
			}
		}
		return bad("unknown service status")
	}
	return bad("not a gantry subject")
}
