package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/micro"
)

// gated is a two-formula local workflow with a health gate between them,
// so it needs every stream: dispatch, gates, events, logs.
func gated(t *testing.T, name string) *dag.Composition {
	dir := t.TempDir()
	return &dag.Composition{Name: name, Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{
			{ID: "first", Server: "me", Nodes: []dag.Node{{Name: "a", Run: "echo a; touch " + filepath.Join(dir, "a")}},
				HealthGate: &dag.HealthGate{Check: "test -f " + filepath.Join(dir, "a"), Timeout: dag.Duration(10 * time.Second), Retries: 3}},
			{ID: "second", Server: "me", DependsOn: []dag.FormulaDep{{Formula: "first", Condition: dag.ConditionHealthy}},
				Nodes: []dag.Node{{Name: "b", Run: "touch " + filepath.Join(dir, "b")}}},
		}}
}

func (s *stack) mustSucceed(c *dag.Composition) {
	s.t.Helper()
	id := s.mustSubmit(c)
	if d := s.wait(id, 40*time.Second); d.Status != dag.WorkflowSucceeded {
		s.t.Fatalf("%s: %s (%s)", c.Name, d.Status, d.Error)
	}
}

func (s *stack) logsContain(want string) bool {
	b, _ := os.ReadFile(s.logs)
	return strings.Contains(string(b), want)
}

// TestHealsDeletedTopology: with a stream, a durable consumer or a bucket
// deleted by someone with the rights to, the next workflow completes, and
// the service that needed it says in its log that it re-created it.
func TestHealsDeletedTopology(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.mustSucceed(gated(t, "before"))
	ctx := context.Background()
	for _, tc := range []struct {
		what   string
		delete func() error
		logged string
	}{
		{"the dispatch stream", func() error { return s.js.DeleteStream(ctx, events.StreamDispatch) }, `"stream":"GANTRY_DISPATCH"`},
		{"the executor's consumer", func() error { return s.js.DeleteConsumer(ctx, events.StreamDispatch, events.ConsumerExecutor) }, `"consumer":"GANTRY_DISPATCH/executor"`},
		{"the gates stream", func() error { return s.js.DeleteStream(ctx, events.StreamGates) }, `"stream":"GANTRY_GATES"`},
		{"the planner's consumer", func() error { return s.js.DeleteConsumer(ctx, events.StreamEvents, events.ConsumerPlanner) }, `"consumer":"GANTRY_EVENTS/planner"`},
		{"the run snapshots", func() error { return s.js.DeleteKeyValue(ctx, events.BucketRuns) }, `"bucket":"gantry_runs"`},
		{"the node records", func() error { return s.js.DeleteKeyValue(ctx, events.BucketNodes) }, `"bucket":"gantry_nodes"`},
		{"the logs stream", func() error { return s.js.DeleteStream(ctx, events.StreamLogs) }, `"stream":"GANTRY_LOGS"`},
		{"the event stream", func() error { return s.js.DeleteStream(ctx, events.StreamEvents) }, `"stream":"GANTRY_EVENTS"`},
		{"nothing: what was projected before is still there", func() error {
			for _, id := range s.workflowIDs(t) {
				if d := s.status(id); d.Status != dag.WorkflowSucceeded {
					return fmt.Errorf("workflow %s: %q", id, d.Status)
				}
			}
			return nil
		}, ""},
		{"the projection", func() error { return s.js.DeleteKeyValue(ctx, events.BucketState) }, `"bucket":"gantry_state"`},
	} {
		n := len(tc.what)
		t.Run(tc.what, func(t *testing.T) {
			if err := tc.delete(); err != nil {
				t.Fatal(err)
			}
			s.mustSucceed(gated(t, fmt.Sprintf("after-%d", n)))
			if tc.logged != "" {
				s.waitFor("the re-creation logged", 2*events.HealInterval, func() bool { return s.logsContain(tc.logged) })
			}
		})
	}
	if !s.logsContain("rebasing the projection") {
		t.Error("the state-store did not say it rebased on the re-created event stream")
	}
	t.Log(s.streamState(t))
}

func (s *stack) rebuildReport(checkOnly bool) events.RebuildReport {
	s.t.Helper()
	b, _ := json.Marshal(events.RebuildQuery{CheckOnly: checkOnly})
	msg, err := s.nc.Request(events.StateRebuild, b, time.Minute)
	if err != nil || msg.Header.Get(micro.ErrorCodeHeader) != "" {
		s.t.Fatalf("rebuild: %v %s %s", err, msg.Header.Get(micro.ErrorHeader), msg.Data)
	}
	var rep events.RebuildReport
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		s.t.Fatal(err)
	}
	return rep
}

// TestRebuildAfterPurge: with the event stream purged, state.rebuild says
// what it cannot rebuild, keeps those documents, and rebuilds what later
// events back; new workflows are projected as before.
func TestRebuildAfterPurge(t *testing.T) {
	s := newStack(t, stackOptions{})
	s.mustSucceed(gated(t, "before-purge"))
	ctx := context.Background()
	st, err := s.js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	for _, check := range []bool{true, false} {
		rep := s.rebuildReport(check)
		if rep.Lost == "" || rep.FirstSeq <= 1 || len(rep.Kept) == 0 || rep.Rewritten {
			t.Fatalf("right after the purge (check %v): %+v", check, rep)
		}
	}
	id := s.mustSubmit(gated(t, "after-purge"))
	if d := s.wait(id, 40*time.Second); d.Status != dag.WorkflowSucceeded || len(d.Formulas) != 2 {
		t.Fatalf("after the purge: %s, %d formulas", d.Status, len(d.Formulas))
	}
	rep := s.rebuildReport(true)
	if rep.Lost == "" || len(rep.Differing) != len(rep.Kept) {
		t.Errorf("check after a new run: what the remaining events back must match: %+v", rep)
	}
	for _, k := range rep.Kept {
		if strings.Contains(k, id) {
			t.Errorf("the new workflow's %s is kept, not rebuilt", k)
		}
	}
	// The workflow from before the purge is still there, as it was.
	if d := s.status(s.workflowIDs(t)[0]); d.Status != dag.WorkflowSucceeded {
		t.Errorf("the workflow from before the purge: %s", d.Status)
	}
}

func (s *stack) workflowIDs(t *testing.T) []string {
	t.Helper()
	kv, err := s.js.KeyValue(context.Background(), events.BucketWorkflows)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
