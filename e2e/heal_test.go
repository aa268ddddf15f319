package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
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
		{"the logs stream", func() error { return s.js.DeleteStream(ctx, events.StreamLogs) }, ""},
	} {
		n := len(tc.what)
		t.Run(tc.what, func(t *testing.T) {
			if err := tc.delete(); err != nil {
				t.Fatal(err)
			}
			s.mustSucceed(gated(t, fmt.Sprintf("after-%d", n)))
			if tc.logged != "" {
				s.waitFor("the re-creation logged", 5*time.Second, func() bool { return s.logsContain(tc.logged) })
			}
		})
	}
	fmt.Println(s.streamState(t))
}
