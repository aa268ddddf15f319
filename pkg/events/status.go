package events

import (
	"time"
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
