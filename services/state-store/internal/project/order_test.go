package project_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// stored is an event as the stream holds it, to be stored again.
type stored struct {
	env     *events.Envelope
	subject string
}

// put stores a new event under id (its CloudEvent id) and applies it.
func (f *feed) put(id string, p events.Payload) stored {
	f.t.Helper()
	f.at = f.at.Add(time.Second)
	env, err := events.NewAt(id, "test/1", f.at, p)
	if err != nil {
		f.t.Fatal(err)
	}
	s := stored{env: env}
	switch e := p.(type) {
	case *events.WorkflowEvent:
		s.subject = events.WorkflowLifecycle(e.WorkflowID)
	case *events.FormulaEvent:
		s.subject = events.HostLifecycle(e.Host)
	case *events.NodeEvent:
		s.subject = events.HostLifecycle(e.Host)
	case *events.ProgressEvent:
		s.subject = events.HostLifecycle(e.Host)
	}
	f.store(s)
	return s
}

// store applies an event at the next stream sequence: a copy of one
// already stored keeps its id, time and data.
func (f *feed) store(s stored) {
	f.t.Helper()
	f.seq++
	if f.audit != nil {
		f.audit.Observe(f.seq, s.env)
	}
	f.p.Apply(context.Background(), []*consume.Event{{Envelope: s.env, Subject: s.subject, Stream: f.seq}}, f.seq)
}

func (f *feed) decode(key string, v any) {
	f.t.Helper()
	if err := json.Unmarshal(f.mem.Vals[key], v); err != nil {
		f.t.Fatalf("%s: %v", key, err)
	}
}

// events of one workflow on host h, formula f.
type run struct {
	f   *feed
	ref events.Ref
}

func (f *feed) run(id string, gen int) *run {
	return &run{f: f, ref: events.Ref{WorkflowID: id, Workflow: "w", Formula: "f", Host: "h", Operation: dag.OpCreate, Generation: gen}}
}

func (r *run) workflow(id string, st dag.WorkflowState, by string) stored {
	ref := r.ref
	ref.Formula, ref.Host = "", ""
	e := &events.WorkflowEvent{Ref: ref, Status: st}
	if st.Terminal() {
		at := r.f.at
		e.EndedAt = &at
	}
	if by != "" {
		e.RequestedBy = &events.Principal{Name: by}
	}
	return r.f.put(id, e)
}

func (r *run) formula(id string, st dag.FormulaState) stored {
	return r.f.put(id, &events.FormulaEvent{Ref: r.ref, Status: st})
}

// node publishes a node transition as the executor does: a running with
// its start, an end with its end and exit code.
func (r *run) node(id, node string, st dag.NodeState, attempt int, willRetry bool) stored {
	ref := r.ref
	ref.Node = node
	at := r.f.at.Add(time.Second)
	e := &events.NodeEvent{Ref: ref, Status: st, SpecHash: spec(node), Actor: "executor/x1", WillRetry: willRetry, Run: events.Run{Attempt: attempt}}
	if st == dag.NodeRunning {
		e.StartedAt = &at
	} else {
		code := 0
		if st == dag.NodeFailed {
			code = 1
		}
		e.EndedAt, e.ExitCode = &at, &code
	}
	return r.f.put(id, e)
}

// A stream holding events stored twice (the same id again, after later
// transitions) and a node's running stored after its succeeded: nothing
// moves back, and each transition and attempt is counted once. As reported
// from a NATS cluster after a long loss of quorum: node.succeeded,
// formula.running and node.running stored again, and the node's running
// after its succeeded.
func TestRepeatedAndLateEventsDoNotMoveBack(t *testing.T) {
	f := newFeed(t)
	r := f.run("wf-1", 1)
	r.workflow("w-acc", dag.WorkflowAccepted, "")
	wRunning := r.workflow("w-run", dag.WorkflowRunning, "")
	r.formula("f-ready", dag.FormulaReady)
	fRunning := r.formula("f-run", dag.FormulaRunning)
	aRunning := r.node("a-run-1", "a", dag.NodeRunning, 1, false)
	aSucceeded := r.node("a-ok-1", "a", dag.NodeSucceeded, 1, false)
	// b: a failed attempt, retried, then succeeded.
	r.node("b-run-1", "b", dag.NodeRunning, 1, false)
	bFailed := r.node("b-retry-1", "b", dag.NodeFailed, 1, true)
	bRunning := r.node("b-run-2", "b", dag.NodeRunning, 2, false)
	r.node("b-ok-2", "b", dag.NodeSucceeded, 2, false)
	r.formula("f-ok", dag.FormulaSucceeded)
	r.workflow("w-ok", dag.WorkflowSucceeded, "")

	// Stored again, after the run's end.
	for _, s := range []stored{aSucceeded, fRunning, aRunning, bFailed, bRunning, wRunning} {
		f.store(s)
	}
	// A running of a's attempt under an id of its own, late.
	r.node("a-run-1-late", "a", dag.NodeRunning, 1, false)

	var wd events.WorkflowDoc
	f.decode(project.WorkflowDocKey("wf-1"), &wd)
	if wd.Status != dag.WorkflowSucceeded || wd.EndedAt == nil {
		t.Errorf("workflow: %s (ended %v), want succeeded", wd.Status, wd.EndedAt)
	}
	if fd := f.formulaDoc("wf-1"); fd.Status != dag.FormulaSucceeded {
		t.Errorf("formula: %s, want succeeded", fd.Status)
	}
	for _, want := range []struct {
		node                  string
		transitions, attempts int
	}{{"a", 2, 1}, {"b", 4, 2}} {
		nd, _ := f.nodeDoc("wf-1", want.node)
		if nd.Status != dag.NodeSucceeded || nd.Transitions != want.transitions || nd.Attempts != want.attempts || nd.EndedAt == nil ||
			nd.ExitCode == nil || *nd.ExitCode != 0 {
			t.Errorf("node %s: %s, %d transitions, %d attempts, ended %v, exit %v; want succeeded, %d, %d, ended, exit 0",
				want.node, nd.Status, nd.Transitions, nd.Attempts, nd.EndedAt, nd.ExitCode, want.transitions, want.attempts)
		}
	}
	raw, _ := f.docs()
	for _, want := range []struct {
		node string
		log  int
	}{{"a", 2}, {"b", 4}} {
		d := doc(t, raw, "w", "f", want.node)
		wantFields(t, want.node, d, `{"status": "succeeded", "in_place": {"status": "succeeded"}}`)
		if d["ended_at"] == nil {
			t.Errorf("%s: per-host document lost its end", want.node)
		}
		if n := len(d["log"].([]any)); n != want.log {
			t.Errorf("%s: per-host log of %d transitions, want %d", want.node, n, want.log)
		}
	}
}

// Retries are transitions: a retry's generation runs a failed node again,
// and a late event of the failed run changes nothing after it.
func TestRetryMovesAFailedNodeOn(t *testing.T) {
	f := newFeed(t)
	r1 := f.run("wf-1", 1)
	r1.workflow("w-acc", dag.WorkflowAccepted, "")
	r1.workflow("w-run", dag.WorkflowRunning, "")
	r1.formula("f-run", dag.FormulaRunning)
	cRunning := r1.node("c-run-1", "c", dag.NodeRunning, 1, false)
	cFailed := r1.node("c-fail-1", "c", dag.NodeFailed, 1, false)
	fFailed := r1.formula("f-fail", dag.FormulaFailed)
	r1.workflow("w-fail", dag.WorkflowFailed, "")
	r2 := f.run("wf-1", 2)
	r2.workflow("w-run-2", dag.WorkflowRunning, "op")
	r2.formula("f-ready-2", dag.FormulaReady)
	r2.formula("f-run-2", dag.FormulaRunning)
	r2.node("c-run-2", "c", dag.NodeRunning, 2, false)
	if nd, _ := f.nodeDoc("wf-1", "c"); nd.Status != dag.NodeRunning || nd.Generation != 2 || nd.Attempts != 2 {
		t.Fatalf("the retry's attempt: %+v", nd)
	}
	r2.node("c-ok-2", "c", dag.NodeSucceeded, 2, false)
	r2.formula("f-ok-2", dag.FormulaSucceeded)
	r2.workflow("w-ok-2", dag.WorkflowSucceeded, "")
	for _, s := range []stored{cFailed, cRunning, fFailed} {
		f.store(s)
	}
	if nd, _ := f.nodeDoc("wf-1", "c"); nd.Status != dag.NodeSucceeded || nd.Transitions != 4 || nd.Attempts != 2 {
		t.Errorf("node c: %+v; want succeeded after 4 transitions, 2 attempts", nd)
	}
	if fd := f.formulaDoc("wf-1"); fd.Status != dag.FormulaSucceeded || fd.Generation != 2 {
		t.Errorf("formula: %+v", fd)
	}
	raw, _ := f.docs()
	wantFields(t, "c", doc(t, raw, "w", "f", "c"), `{"status": "succeeded", "in_place": {"status": "succeeded"}}`)
}

// A pause stored twice, the second copy after the resume, leaves the
// workflow running, and each request is recorded once.
func TestPauseStoredTwiceAfterTheResume(t *testing.T) {
	f := newFeed(t)
	r := f.run("wf-1", 1)
	r.workflow("w-acc", dag.WorkflowAccepted, "op")
	r.workflow("w-run", dag.WorkflowRunning, "")
	pause := r.workflow("w-pause-1", dag.WorkflowPaused, "op")
	r.workflow("w-resume-2", dag.WorkflowRunning, "op")
	f.store(pause)
	var wd events.WorkflowDoc
	f.decode(project.WorkflowDocKey("wf-1"), &wd)
	if wd.Status != dag.WorkflowRunning || len(wd.Requests) != 2 {
		t.Errorf("after a pause stored again: %s with %d requests %+v; want running with 2", wd.Status, len(wd.Requests), wd.Requests)
	}
	r.workflow("w-pause-3", dag.WorkflowPaused, "op")
	f.decode(project.WorkflowDocKey("wf-1"), &wd)
	if wd.Status != dag.WorkflowPaused || len(wd.Requests) != 3 {
		t.Errorf("a new pause: %s with %d requests; want paused with 3", wd.Status, len(wd.Requests))
	}
}

// A node's progress stored again after its attempt ended changes nothing.
func TestProgressAfterTheEndChangesNothing(t *testing.T) {
	f := newFeed(t)
	r := f.run("wf-1", 1)
	r.node("a-run-1", "a", dag.NodeRunning, 1, false)
	ref := r.ref
	ref.Node = "a"
	half := f.put("a-p50", &events.ProgressEvent{Ref: ref, Attempt: 1, Percent: 50})
	f.put("a-p100", &events.ProgressEvent{Ref: ref, Attempt: 1, Percent: 100})
	r.node("a-ok-1", "a", dag.NodeSucceeded, 1, false)
	f.store(half)
	if nd, _ := f.nodeDoc("wf-1", "a"); nd.Progress != 100 || nd.Status != dag.NodeSucceeded {
		t.Errorf("after a progress stored again: %d%%, %s; want 100%%, succeeded", nd.Progress, nd.Status)
	}
}

// The per-host document of a node is its last transition across the
// composition's workflows: one of an earlier workflow stored again after a
// later workflow's transition (its succeeded, or its running) changes
// nothing.
func TestEarlierWorkflowStoredAgainLeavesTheHostNode(t *testing.T) {
	f := newFeed(t)
	r1 := f.run("wf-1", 1)
	aRunning := r1.node("a-run-1", "a", dag.NodeRunning, 1, false)
	aSucceeded := r1.node("a-ok-1", "a", dag.NodeSucceeded, 1, false)
	r2 := f.run("wf-2", 1)
	r2.node("a-blocked", "a", dag.NodeBlocked, 0, false)
	f.store(aSucceeded)
	f.store(aRunning)
	raw, _ := f.docs()
	d := doc(t, raw, "w", "f", "a")
	wantFields(t, "a", d, `{"status": "blocked", "workflow_id": "wf-2", "in_place": {"status": "succeeded", "workflow_id": "wf-1"}}`)
	if n := len(d["log"].([]any)); n != 3 {
		t.Errorf("per-host log of %d transitions, want 3", n)
	}
}

// The accepted event's vars (--var, --var-file) are kept on the
// workflow's document, a secret-looking name's value masked even when the
// event carried it.
func TestAcceptedVarsKept(t *testing.T) {
	f := newFeed(t)
	r := f.run("wf-1", 1)
	f.put("acc", &events.WorkflowEvent{Ref: events.Ref{WorkflowID: "wf-1", Workflow: "w", Operation: dag.OpCreate, Generation: 1},
		Status: dag.WorkflowAccepted, Vars: map[string]string{"env": "prod", "api_token": "abc"}})
	r.workflow("run", dag.WorkflowRunning, "")
	var doc events.WorkflowDoc
	f.decode(project.WorkflowDocKey("wf-1"), &doc)
	if len(doc.Vars) != 2 || doc.Vars["env"] != "prod" || doc.Vars["api_token"] != "***" {
		t.Fatalf("vars %v, want env=prod and api_token masked", doc.Vars)
	}
}
