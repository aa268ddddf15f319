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
	"github.com/gantry-dev/gantry/pkg/eventbus"
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

// in is the stack seen from subtest t: its failures are t's.
func (s *stack) in(t *testing.T) *stack {
	c := *s
	c.t = t
	return &c
}

func (s *stack) logsContain(want string) bool {
	return strings.Contains(s.readLogs(), want)
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
			s := s.in(t)
			if err := tc.delete(); err != nil {
				t.Fatal(err)
			}
			s.mustSucceed(gated(t, fmt.Sprintf("after-%d", n)))
			if tc.logged != "" {
				s.waitFor("the re-creation logged", 2*eventbus.HealInterval, func() bool { return s.logsContain(tc.logged) })
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
	rep, err := s.cl.WithTimeout(time.Minute).Rebuild(context.Background(), events.RebuildQuery{CheckOnly: checkOnly})
	if err != nil {
		s.t.Fatalf("rebuild: %s", failure(err))
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
	// The workflow records: a workflow id is one token (the planner also
	// lists each composition's runs there, under composition.<name>.<id>).
	l, err := kv.ListKeysFiltered(context.Background(), "*")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// slowGated is gated with a node that takes a while and counts its starts,
// and a gate that passes only once the file "open" exists: a test can
// delete something while the node runs, or while the gate is being
// checked.
func slowGated(t *testing.T, name string) (*dag.Composition, string) {
	dir := t.TempDir()
	f := func(n string) string { return filepath.Join(dir, n) }
	c := &dag.Composition{Name: name, Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{
			{ID: "first", Server: "me", Nodes: []dag.Node{{Name: "a", Run: fmt.Sprintf("echo start >> %s; sleep 2; echo end >> %s", f("a.starts"), f("a.ends"))}},
				HealthGate: &dag.HealthGate{Check: fmt.Sprintf("touch %s; test -f %s", f("gate.checked"), f("open")), Timeout: dag.Duration(20 * time.Second), Retries: 20}},
			{ID: "second", Server: "me", DependsOn: []dag.FormulaDep{{Formula: "first", Condition: dag.ConditionHealthy}},
				Nodes: []dag.Node{{Name: "b", Run: "true"}}},
		}}
	return c, dir
}

// count is how many lines the file at path has (0 when there is none).
func count(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

// TestHealsMidRun: a work stream or durable consumer deleted while a
// workflow is under way (its node running, or its gate being checked):
// the workflow completes, and its node ran once.
func TestHealsMidRun(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	for _, tc := range []struct {
		what   string
		during string // "node" or "gate"
		delete func() error
		// shared: the re-created consumer delivers the message again, and
		// the delivery waits for the handler already running it.
		shared bool
	}{
		{"the executor's consumer", "node", func() error { return s.js.DeleteConsumer(ctx, events.StreamDispatch, events.ConsumerExecutor) }, true},
		{"the dispatch stream", "node", func() error { return s.js.DeleteStream(ctx, events.StreamDispatch) }, false},
		{"the gates stream", "gate", func() error { return s.js.DeleteStream(ctx, events.StreamGates) }, false},
		{"the health-gate's consumer", "gate", func() error { return s.js.DeleteConsumer(ctx, events.StreamGates, events.ConsumerHealthGate) }, true},
	} {
		t.Run(tc.what, func(t *testing.T) {
			s := s.in(t)
			joined := strings.Count(s.readLogs(), sharedLog)
			c, dir := slowGated(t, "midrun")
			id := s.mustSubmit(c)
			marker := map[string]string{"node": "a.starts", "gate": "gate.checked"}[tc.during]
			s.waitFor(tc.during+" under way", 20*time.Second, func() bool {
				return count(filepath.Join(dir, "a.starts")) > 0 && fileExists(filepath.Join(dir, marker))
			})
			if err := tc.delete(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // repaired while the work goes on
			if err := os.WriteFile(filepath.Join(dir, "open"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if d := s.wait(id, 40*time.Second); d.Status != dag.WorkflowSucceeded {
				t.Fatalf("%s: %s", d.Status, d.Error)
			}
			if n := count(filepath.Join(dir, "a.starts")); n != 1 {
				t.Errorf("node a started %d times", n)
			}
			if tc.shared && strings.Count(s.readLogs(), sharedLog) == joined {
				t.Errorf("no delivery was settled with the result of the handler running it (%q)", sharedLog)
			}
		})
	}
}

// sharedLog is what pkg/consume logs when a message delivered again waits
// for the handler already running it.
const sharedLog = "delivered again while its handler ran here"

func (s *stack) readLogs() string {
	b, _ := os.ReadFile(s.logs)
	return string(b)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
