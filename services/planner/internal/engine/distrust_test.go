package engine

import (
	"context"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// What the planner skips as already done comes from what the executors
// recorded (gantry_nodes) for the runs the planner accepted, never from
// the state-store's projection (gantry_state): a stolen state-store
// credential changes what status, state and drift report, not what runs,
// and a damaged record of either never refuses a submission.
func TestSkipComesFromTheExecutorsRecordsOnly(t *testing.T) {
	t.Parallel()
	const garbage = "\x00 not a record"
	cases := map[string]struct {
		node     dag.NodeState // what the executor recorded for a/x in the first run ("" none)
		nodeRaw  bool          // the executor's record of a/x does not decode
		forged   bool          // gantry_state says a/x is in place with the right spec
		stateRaw bool          // gantry_state's a/x does not decode
		skip     bool          // the second run skips a/x
	}{
		"state says succeeded, the executor recorded failed":  {node: dag.NodeFailed, forged: true},
		"state says succeeded, the executor recorded nothing": {forged: true},
		"a state doc that does not decode":                    {node: dag.NodeFailed, stateRaw: true},
		"a state doc that does not decode is not needed":      {node: dag.NodeSucceeded, stateRaw: true, skip: true},
		"a node record that does not decode":                  {node: dag.NodeSucceeded, nodeRaw: true, forged: true},
		"the executor recorded succeeded with the same spec":  {node: dag.NodeSucceeded, skip: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			reply, err := h.e.Submit(context.Background(), []byte(chain), true, operator)
			must(t, err)
			hash := reply.Plan.Formulas[0].Nodes[0].SpecHash
			must(t, h.submit(chain))
			first := h.id
			if tc.node != "" {
				h.nodes.Set(events.NodeKey(first, dag.OpCreate, "a", "x"), events.NodeRecord{Status: tc.node, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: hash})
			}
			if tc.nodeRaw {
				h.nodes.SetRaw(events.NodeKey(first, dag.OpCreate, "a", "x"), []byte(garbage))
			}
			st := dag.FormulaSucceeded
			if tc.node != dag.NodeSucceeded {
				st = dag.FormulaFailed
			}
			must(t, h.formula("a", 1, st))
			key := events.HostNodeKey("h1", "chain", "a", "x")
			if tc.forged {
				h.hosts.Set(key, events.HostNode{Host: "h1", Workflow: "chain", Formula: "a", Node: "x", Status: dag.NodeSucceeded, Operation: dag.OpCreate,
					SpecHash: hash, WorkflowID: first, InPlace: &events.InPlace{Status: dag.NodeSucceeded, SpecHash: hash, WorkflowID: first}})
			}
			if tc.stateRaw {
				h.hosts.SetRaw(key, []byte(garbage))
			}
			h.stored()
			if err := h.submit(chain); err != nil {
				t.Fatalf("second submit: %v", err)
			}
			want := "dispatch a create g1"
			if tc.skip {
				want += " skip x"
			}
			wantStored(t, h, "workflow accepted", "workflow running", "a ready", want)
		})
	}
}
