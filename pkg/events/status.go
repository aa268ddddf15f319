package events

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Every service is a NATS micro service named gantry-<service>: `nats
// micro ls` lists them with their versions and instances, and each has a
// status endpoint on status.<service> that answers what the instance is
// doing. The same status is that endpoint's data in `nats micro stats`.

// StatusEndpoint is the name of every service's status endpoint.
const StatusEndpoint = "status"

// ServiceName is the NATS micro service name of a service: gantry-<id>.
func (id Identity) ServiceName() string { return "gantry-" + string(id) }

// StatusSubject is status.<service>, the subject of its status endpoint.
func StatusSubject(id Identity) string { return "status." + string(id) }

// MaxStatusItems bounds the work listed in a status (the counts are whole).
const MaxStatusItems = 50

// PlannerStatus is the planner's status: the workflows it has accepted or
// steps that have not ended (running or paused) in this instance.
type PlannerStatus struct {
	Instance        string        `json:"instance"`
	WorkflowsActive int           `json:"workflows_active"`
	Storage         StorageStatus `json:"storage"`
}

// ExecutorStatus is what an executor is running.
type ExecutorStatus struct {
	Instance        string        `json:"instance"`
	Zone            string        `json:"zone,omitempty"`
	MaxFormulas     int           `json:"max_formulas"`
	RunningFormulas int           `json:"running_formulas"`
	RunningNodes    int           `json:"running_nodes"`
	Nodes           []RunningNode `json:"nodes"` // at most MaxStatusItems, oldest first
	// HeldFormulas counts the formulas holding their next nodes because
	// their workflow is paused; Held lists them (at most MaxStatusItems,
	// the longest held first).
	HeldFormulas int           `json:"held_formulas"`
	Held         []HeldFormula `json:"held,omitempty"`
	Storage      StorageStatus `json:"storage"`
}

// HeldFormula is a formula whose workflow is paused: its running nodes
// finish, its next ones wait for the resume.
type HeldFormula struct {
	WorkflowID string    `json:"workflow_id"`
	Formula    string    `json:"formula"`
	Host       string    `json:"host"`
	Since      time.Time `json:"since"`
}

// RunningNode is a node running in an executor.
type RunningNode struct {
	WorkflowID string    `json:"workflow_id"`
	Formula    string    `json:"formula"`
	Host       string    `json:"host"`
	Node       string    `json:"node"`
	Since      time.Time `json:"since"`
}

// HealthGateStatus is what a health-gate worker is checking.
type HealthGateStatus struct {
	Instance        string           `json:"instance"`
	GatesInProgress int              `json:"gates_in_progress"`
	Gates           []GateInProgress `json:"gates"` // at most MaxStatusItems, oldest first
	Storage         StorageStatus    `json:"storage"`
}

// GateInProgress is a gate being checked.
type GateInProgress struct {
	WorkflowID string    `json:"workflow_id"`
	Formula    string    `json:"formula"`
	Host       string    `json:"host"`
	Since      time.Time `json:"since"`
}

// StateStoreStatus is how far the state-store's projection is behind the
// event stream: ProjectionLag events stored but not yet projected.
type StateStoreStatus struct {
	Instance      string        `json:"instance"`
	AppliedSeq    uint64        `json:"applied_seq"`
	StreamLastSeq uint64        `json:"stream_last_seq"`
	ProjectionLag uint64        `json:"projection_lag"`
	Error         string        `json:"error,omitempty"` // the stream could not be read
	Storage       StorageStatus `json:"storage"`
}

// Each status also says whether JetStream stores the instance's writes
// (Storage: ok, or the streams and buckets its writes fail on and why).

// ServiceSpec describes a service's NATS micro service.
type ServiceSpec struct {
	ID          Identity
	Version     string // a semantic version (buildinfo.Version)
	Instance    string // this process ("executor/<host>-<pid>"), in the metadata
	Description string
	// Status is this instance's status (one of the *Status types): the
	// status endpoint's reply and its data in `nats micro stats`.
	Status func() any
	// Storage is what the instance sees of JetStream storage, for its
	// status (nil: nothing observed).
	Storage *Storage
}

// AddService adds the service, with its status endpoint. The caller adds
// any other endpoints, and stops it.
func AddService(nc *nats.Conn, s ServiceSpec) (micro.Service, error) {
	status := func(e *micro.Endpoint) any {
		if e.Name != StatusEndpoint {
			return nil
		}
		return s.Status()
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:         s.ID.ServiceName(),
		Version:      s.Version,
		Description:  s.Description,
		Metadata:     map[string]string{"instance": s.Instance},
		StatsHandler: status,
	})
	if err != nil {
		return nil, fmt.Errorf("micro service %s: %w", s.ID.ServiceName(), err)
	}
	err = svc.AddEndpoint(StatusEndpoint, OnlyRequests(micro.HandlerFunc(func(req micro.Request) {
		b, err := json.Marshal(s.Status())
		if err != nil {
			_ = req.Error("500", err.Error(), nil)
			return
		}
		_ = req.Respond(b)
	})), micro.WithEndpointSubject(StatusSubject(s.ID)))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("micro service %s: status endpoint: %w", s.ID.ServiceName(), err)
	}
	return svc, nil
}
