package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
)

func (s *stack) control(id, verb string) (string, string) {
	s.t.Helper()
	r, err := s.cl.WithTimeout(10*time.Second).Control(context.Background(), id, verb, nil)
	var se *client.ServiceError
	if errors.As(err, &se) {
		return se.Description, se.Code
	}
	if err != nil {
		s.t.Fatalf("%s: %v", verb, err)
	}
	b, _ := json.Marshal(r) // the reply as the planner sent it
	return string(b), ""
}

// status reads a workflow document now.
func (s *stack) status(id string) *events.WorkflowDoc {
	s.t.Helper()
	d, err := s.cl.WithTimeout(5*time.Second).Status(context.Background(), id)
	var se *client.ServiceError
	if errors.As(err, &se) {
		return &events.WorkflowDoc{} // none yet
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return d
}

func (s *stack) waitFor(what string, timeout time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Cancel kills the running node on its host and cancels what has not
// started.
func TestCancelKillsRunningNodes(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	marker := fmt.Sprintf("gantry-e2e-cancel-%d", time.Now().UnixNano())
	c := &dag.Composition{Name: "long", Hosts: map[string]dag.Host{"h": {Address: h.Addr, User: s.fleet.User}},
		Formulas: []dag.Formula{
			{ID: "slow", Server: "h", Nodes: []dag.Node{{Name: "wait", Run: "sleep 300 & sleep 301; echo " + marker}}},
			{ID: "after", Server: "h", DependsOn: []dag.FormulaDep{{Formula: "slow"}}, Nodes: []dag.Node{{Name: "never", Run: "touch " + h.Dir + "/never"}}},
		}}
	id := s.mustSubmit(c)
	s.waitFor("the slow node to run", 15*time.Second, func() bool {
		f := s.status(id).Formulas["slow"]
		return f != nil && f.Nodes["wait"] != nil && f.Nodes["wait"].Status == dag.NodeRunning
	})
	if body, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel: %s %s", code, body)
	}
	doc := s.wait(id, 15*time.Second)
	if doc.Status != dag.WorkflowCancelled {
		t.Fatalf("workflow %s", doc.Status)
	}
	// CANCELLED comes only after the running node was killed.
	evs := s.events(id)
	killed, cancelled := index(evs, events.FamilyNode, "slow", "wait", "cancelled"), index(evs, events.FamilyWorkflow, "", "", "cancelled")
	if killed < 0 || cancelled < killed {
		t.Fatalf("the workflow's cancelled event (%d) came before its running node's (%d): %v", cancelled, killed, evs)
	}
	if n := doc.Formulas["slow"].Nodes["wait"]; n.Status != dag.NodeCancelled {
		t.Errorf("when the workflow was cancelled its running node was %s", n.Status)
	}
	if f := s.status(id).Formulas["after"]; f.Status != dag.FormulaCancelled || f.Nodes["never"].Status != dag.NodeCancelled {
		t.Errorf("after = %+v", f)
	}
	// The per-host projection says the same: the killed node is not
	// left running, and the one that never started names its workflow.
	s.wantHostDoc("h", "long", "slow", "wait", map[string]any{"status": dag.NodeCancelled, "operation": dag.OpCreate, "workflow_id": id})
	s.wantHostDoc("h", "long", "after", "never", map[string]any{"status": dag.NodeCancelled, "operation": dag.OpCreate, "workflow_id": id})
	s.waitFor("no process left on the host", 10*time.Second, func() bool {
		out, _ := exec.Command("pgrep", "-f", marker).Output()
		return strings.TrimSpace(string(out)) == ""
	})
	if _, code := s.control(id, events.VerbCancel); code != "409" {
		t.Errorf("cancelling a cancelled workflow: code %q, want 409", code)
	}
	if _, code := s.control("no-such-workflow", events.VerbPause); code != "404" {
		t.Errorf("unknown workflow: code %q, want 404", code)
	}
}

// Nothing new is dispatched while a workflow is paused; what runs
// finishes.
func TestPauseResume(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	// a runs until the test releases it (at most 30 s), so the pause
	// comes while it runs: a pause before a node starts holds that node
	// too (TestPauseStartsNoNodeUntilResume).
	release := dir + "/release"
	c := &dag.Composition{Name: "pausable", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{
			{ID: "first", Server: "me", Nodes: []dag.Node{{Name: "a", Run: "touch " + dir + "/started; for i in $(seq 600); do [ -e " + release + " ] && break; sleep 0.05; done; touch " + dir + "/a"}}},
			{ID: "second", Server: "me", DependsOn: []dag.FormulaDep{{Formula: "first"}}, Nodes: []dag.Node{{Name: "b", Run: "touch " + dir + "/b"}}},
		}}
	id := s.mustSubmit(c)
	s.waitFor("a to run", 15*time.Second, func() bool { _, err := os.Stat(dir + "/started"); return err == nil })
	if body, code := s.control(id, events.VerbPause); code != "" {
		t.Fatalf("pause: %s %s", code, body)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.waitFor("first to finish", 15*time.Second, func() bool {
		f := s.status(id).Formulas["first"]
		return f != nil && f.Status == dag.FormulaSucceeded
	})
	time.Sleep(1500 * time.Millisecond)
	d := s.status(id)
	if d.Status != dag.WorkflowPaused || d.Formulas["second"] != nil && d.Formulas["second"].Status != dag.FormulaPending {
		t.Fatalf("while paused: %s, second %+v", d.Status, d.Formulas["second"])
	}
	if _, err := os.Stat(dir + "/b"); err == nil {
		t.Fatal("b ran while the workflow was paused")
	}
	if body, code := s.control(id, events.VerbResume); code != "" {
		t.Fatalf("resume: %s %s", code, body)
	}
	if d := s.wait(id, 15*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("after resume: %s", d.Status)
	}
}

// A host goes down mid-run: its node fails after its retries and its
// dependents are blocked; once the host is back, retry finishes the
// workflow without re-running what succeeded.
func TestHostDownThenRetry(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 2})
	h0, h1 := s.fleet.Hosts[0], s.fleet.Hosts[1]
	mark := func(h string, n string) string {
		return "echo " + n + " >> " + map[string]string{"a": h0.Dir, "b": h1.Dir}[h] + "/markers"
	}
	c := &dag.Composition{Name: "hostdown", OnFailure: dag.OnFailureContinue,
		Hosts: map[string]dag.Host{"a": {Address: h0.Addr, User: s.fleet.User}, "b": {Address: h1.Addr, User: s.fleet.User}},
		Retry: &dag.RetryPolicy{MaxAttempts: 3, InitialInterval: dag.Duration(100 * time.Millisecond), MaxInterval: dag.Duration(200 * time.Millisecond), Multiplier: 2},
		Formulas: []dag.Formula{
			{ID: "b-base", Server: "b", Nodes: []dag.Node{{Name: "base", Run: mark("b", "base")}}},
			{ID: "a-slow", Server: "a", Nodes: []dag.Node{{Name: "slow", Run: "sleep 1; " + mark("a", "slow")}}},
			{ID: "b-app", Server: "b", DependsOn: []dag.FormulaDep{{Formula: "b-base"}, {Formula: "a-slow"}}, Nodes: []dag.Node{{Name: "app", Run: mark("b", "app")}}},
			{ID: "b-top", Server: "b", DependsOn: []dag.FormulaDep{{Formula: "b-app"}}, Nodes: []dag.Node{{Name: "top", Run: mark("b", "top")}}},
			{ID: "a-other", Server: "a", DependsOn: []dag.FormulaDep{{Formula: "a-slow"}}, Nodes: []dag.Node{{Name: "other", Run: mark("a", "other")}}},
		}}
	id := s.mustSubmit(c)
	s.waitFor("b-base to succeed", 15*time.Second, func() bool {
		f := s.status(id).Formulas["b-base"]
		return f != nil && f.Status == dag.FormulaSucceeded
	})
	h1.Stop() // host b goes down while a-slow still runs
	doc := s.wait(id, 30*time.Second)
	app := doc.Formulas["b-app"].Nodes["app"]
	if doc.Status != dag.WorkflowFailed || app.Status != dag.NodeFailed || app.Attempts != 3 || !strings.Contains(app.Error, "cannot connect") {
		t.Fatalf("workflow %s; b-app/app %+v", doc.Status, app)
	}
	if top := doc.Formulas["b-top"]; top.Status != dag.FormulaBlocked || top.Blocker != "b-app" {
		t.Fatalf("b-top %+v", top)
	}
	if doc.Formulas["a-other"].Status != dag.FormulaSucceeded {
		t.Fatalf("independent a-other: %+v", doc.Formulas["a-other"])
	}
	h1.Start()
	if body, code := s.control(id, events.VerbRetry); code != "" {
		t.Fatalf("retry: %s %s", code, body)
	}
	doc = s.waitGen(id, 2, 30*time.Second)
	if doc.Status != dag.WorkflowSucceeded || doc.Generation != 2 {
		t.Fatalf("after retry: %s (generation %d)", doc.Status, doc.Generation)
	}
	mb, ma := markers(t, h1), markers(t, h0)
	if mb["base"] != 1 || mb["app"] != 1 || mb["top"] != 1 || ma["slow"] != 1 || ma["other"] != 1 {
		t.Fatalf("markers after retry: b %v, a %v (succeeded nodes must not run again)", mb, ma)
	}
	if body, code := s.control(id, events.VerbRetry); code != "409" {
		t.Errorf("retry of a succeeded workflow: %s %s", code, body)
	}
}

// Garbage on every subject a service consumes is terminated, not
// redelivered forever, and the services keep working.
func TestPoisonInputIsTerminated(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	wellFormedBad, _ := events.NewAt("x", "test", time.Now(), &events.Dispatch{Ref: events.Ref{WorkflowID: "w", Workflow: "w", Formula: "f", Host: "h", Operation: dag.OpCreate}, Host: events.HostSpec{Transport: dag.TransportLocal}, MaxParallel: 1})
	bad, _ := json.Marshal(wellFormedBad)
	for _, subj := range []string{"decky.h.dispatch._", "decky.h.gate", "decky.h.lifecycle", "decky.h.health", "workflow.w.lifecycle"} {
		for _, payload := range [][]byte{[]byte("not json at all"), []byte(`{"specversion":"1.0","id":"1","source":"x","type":"gantry.node.exploded","data":{}}`), bad, []byte(`{"specversion":"1.0","id":"2","source":"x","type":"gantry.node.failed","data":{"workflow_id":"A.B"}}`)} {
			if _, err := s.js.Publish(ctx, subj, payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	for stream, consumers := range eventbus.Consumers() {
		for _, cc := range consumers {
			s.waitFor("consumer "+cc.Durable+" to settle the poison", 15*time.Second, func() bool {
				cons, err := s.js.Consumer(ctx, stream, cc.Durable)
				if err != nil {
					return false
				}
				info, err := cons.Info(ctx)
				return err == nil && info.NumPending == 0 && info.NumAckPending == 0
			})
			cons, _ := s.js.Consumer(ctx, stream, cc.Durable)
			info, _ := cons.Info(ctx)
			if info.NumRedelivered > 0 {
				t.Errorf("%s redelivered poison %d times", cc.Durable, info.NumRedelivered)
			}
		}
	}
	c := &dag.Composition{Name: "after-poison", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "f", Server: "me", Nodes: []dag.Node{{Name: "n", Run: "true"}}, HealthGate: &dag.HealthGate{Check: "true", Timeout: dag.Duration(5 * time.Second), Retries: 2}}}}
	if d := s.wait(s.mustSubmit(c), 15*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("services stopped working after poison: %s", d.Status)
	}
}

// A pause stops new nodes everywhere, not only new formulas: a formula
// whose node runs on a real sshd host when the workflow is paused
// finishes that node, and starts its next one only after the resume (the
// executor says it holds it); what ran shows on the host.
func TestPauseStartsNoNodeUntilResume(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	release := h.Dir + "/release"
	c := &dag.Composition{Name: "pausenodes", Hosts: map[string]dag.Host{"h": {Address: h.Addr, User: s.fleet.User}},
		Formulas: []dag.Formula{{ID: "f", Server: "h", Nodes: []dag.Node{
			{Name: "s1", Run: "while [ ! -e " + release + " ]; do sleep 0.05; done; echo s1 >> " + h.Dir + "/markers"},
			{Name: "s2", Run: "echo s2 >> " + h.Dir + "/markers"},
			{Name: "s3", Run: "echo s3 >> " + h.Dir + "/markers"},
		}}}}
	id := s.mustSubmit(c)
	s.waitFor("s1 to run on the host", 30*time.Second, func() bool {
		f := s.status(id).Formulas["f"]
		return f != nil && f.Nodes["s1"] != nil && f.Nodes["s1"].Status == dag.NodeRunning
	})
	if body, code := s.control(id, events.VerbPause); code != "" {
		t.Fatalf("pause: %s %s", code, body)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil { // s1 ends
		t.Fatal(err)
	}
	// The executor holds s2 (it reads the run state before it starts a
	// node): it says so in its status, with s2 not started on the host.
	s.waitFor("the executor to hold the formula", 30*time.Second, func() bool {
		if m := markers(t, h); m["s2"] > 0 {
			t.Fatalf("s2 ran on the host while the workflow was paused: %v", m)
		}
		st, err := tryStatus[events.ExecutorStatus](s.cl, events.Executor)
		return err == nil && st.HeldFormulas == 1 && st.Held[0].WorkflowID == id && st.Held[0].Formula == "f"
	})
	if m := markers(t, h); m["s1"] != 1 || m["s2"] != 0 {
		t.Fatalf("while paused, the host has %v; want s1 done, s2 not started", m)
	}
	if d := s.status(id); d.Status != dag.WorkflowPaused || d.Formulas["f"].Nodes["s1"].Status != dag.NodeSucceeded || d.Formulas["f"].Nodes["s2"] != nil {
		t.Fatalf("while paused: %s, nodes %+v", d.Status, d.Formulas["f"].Nodes)
	}
	if body, code := s.control(id, events.VerbResume); code != "" {
		t.Fatalf("resume: %s %s", code, body)
	}
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("after the resume: %s %s", d.Status, d.Error)
	}
	if m := markers(t, h); m["s1"] != 1 || m["s2"] != 1 || m["s3"] != 1 {
		t.Fatalf("markers %v", m)
	}
	// In the stream: nothing of s2 between the pause and the resume.
	evs := s.events(id)
	paused, resumed, s2 := index(evs, events.FamilyWorkflow, "", "", "paused"), -1, index(evs, events.FamilyNode, "f", "s2", "running")
	for i := paused + 1; i < len(evs); i++ {
		if evs[i].typ.Family() == events.FamilyWorkflow && evs[i].status == "running" {
			resumed = i
			break
		}
	}
	if paused < 0 || resumed < 0 || s2 < resumed {
		t.Fatalf("s2 running at %d, paused at %d, resumed at %d: %v", s2, paused, resumed, evs)
	}
}
