package events_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// The records services keep for each other, and the control reply, are
// part of the wire contract: a change shows here.
func TestRecordsGolden(t *testing.T) {
	exit := 0
	for name, v := range map[string]any{
		"record_run_snapshot": events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning, StartedAt: t0, Formulas: "shRrp", Blockers: map[int]int{4: 1},
			Deadlines: map[string]time.Time{"cp-containerd": t1}, Expired: []string{"cp-os"}},
		"record_outputs": events.OutputRecord{WorkflowID: ref.WorkflowID, Generation: 1, Attempt: 2, SpecHash: "sha256:ab",
			Values: map[string]string{"join_cmd": "kubeadm join 10.0.0.10:6443", "token": "abcdef.0123456789abcdef"}, Secret: []string{"token"}, WrittenAt: t0},
		"record_node": events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 3, Generation: 2, GenAttempts: 1, ExitCode: &exit, SpecHash: "sha256:ab"},
		"record_host_node": events.HostNode{Host: "cp-0", Workflow: "wuji", Formula: "os", Node: "base", Status: dag.NodeSucceeded, Operation: dag.OpCreate,
			SpecHash: "sha256:ab", WorkflowID: ref.WorkflowID, StartedAt: &t0, EndedAt: &t0, Actor: "executor/vm-1", LastSeq: 42,
			InPlace: &events.InPlace{Status: dag.NodeSucceeded, SpecHash: "sha256:ab", WorkflowID: ref.WorkflowID, EndedAt: &t0},
			Check:   &events.HostCheck{Status: dag.NodeSucceeded, Result: events.CheckOK, SpecHash: "sha256:ab", WorkflowID: "1c0ffee0-4f0c-4c51-9d0e-7a4d2f9e8a11", EndedAt: &t0},
			Log:     []events.HostLogEntry{{Time: t0, Event: events.NodeType(dag.NodeSucceeded), WorkflowID: ref.WorkflowID, Operation: dag.OpCreate, Status: dag.NodeSucceeded, Attempt: 1}}},
		"reply_control": events.ControlReply{WorkflowID: ref.WorkflowID, Status: dag.WorkflowPaused, Generation: 1},
		"reply_rebuild": events.RebuildReport{Keys: 12, UpTo: 480, Differing: []string{"host.cp-0.wuji.os.base", "wf.x"}, FirstSeq: 401,
			Lost: "events 1-400 are no longer in GANTRY_EVENTS", Kept: []string{"host.cp-0.wuji.os.base"}, Workflows: 3,
			Findings: []events.StreamFinding{{Kind: events.FindingOutOfOrder, WorkflowID: ref.WorkflowID, Formula: "os", Node: "base", Seqs: []uint64{410, 470},
				Detail: "gantry.node.running (generation 1, attempt 1) stored after gantry.node.succeeded (generation 1, attempt 1)"}}, MoreFindings: 2},
		"status_planner": events.PlannerStatus{Instance: "planner/vm-1-42", WorkflowsActive: 3, Storage: events.StorageStatus{OK: true}},
		"status_executor": events.ExecutorStatus{Instance: "executor/vm-1-43", Zone: "eu-1", MaxFormulas: 64, RunningFormulas: 1, RunningNodes: 1,
			Nodes: []events.RunningNode{{WorkflowID: ref.WorkflowID, Formula: "os", Host: "cp-0", Node: "base", Since: t0}},
			Storage: events.StorageStatus{Problems: []events.StorageProblem{{Stream: events.BucketSlots, Cause: "no answer while connected (JetStream does not answer a write it cannot store, as when its disk is full)", Since: t0, Failures: 4,
				LastError: "context deadline exceeded"}}}},
		"status_health_gate": events.HealthGateStatus{Instance: "health-gate/vm-1-44", GatesInProgress: 1,
			Gates: []events.GateInProgress{{WorkflowID: ref.WorkflowID, Formula: "os", Host: "cp-0", Since: t0}}, Storage: events.StorageStatus{OK: true}},
		"status_state_store": events.StateStoreStatus{Instance: "state-store/vm-1-45", AppliedSeq: 480, StreamLastSeq: 482, ProjectionLag: 2,
			Storage: events.StorageStatus{Problems: []events.StorageProblem{{Stream: events.BucketState, Cause: "insufficient storage", Since: t0, Failures: 1,
				LastError: "nats: API error: code=500 err_code=10047 description=insufficient storage resources available"}}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, append(got, '\n'))
		})
	}
}
