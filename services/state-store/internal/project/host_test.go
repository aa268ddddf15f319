package project_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/drift"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// The per-host projection is checked here against expectations written
// out by hand, not against a replay: a replay runs the same code, and
// agrees with it whatever it does.

// feed applies events to a projector over memory, one at a time, as the
// state-store follows the stream.
type feed struct {
	t   *testing.T
	p   *project.Projector
	mem *project.MemStore
	seq uint64
	at  time.Time
	// audit, when set, observes what store applies.
	audit *project.Audit
}

func newFeed(t *testing.T) *feed {
	mem := project.NewMemStore()
	return &feed{t: t, mem: mem, p: &project.Projector{Store: mem, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		at: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
}

// wf is a workflow of composition name, id and operation: node events
// of it.
type wf struct {
	f                       *feed
	name, id, formula, host string
	op                      dag.Operation
}

func (f *feed) workflow(name, id string, op dag.Operation) *wf {
	return &wf{f: f, name: name, id: id, op: op, formula: "f", host: "h"}
}

// node applies one node event as the executor publishes it: with its
// actor, and the attempt's times.
func (w *wf) node(node string, st dag.NodeState, ev events.NodeEvent) {
	w.f.t.Helper()
	at := w.f.at.Add(time.Second)
	ev.Actor = "executor/x1"
	if st == dag.NodeRunning {
		ev.StartedAt = &at
	} else {
		ev.EndedAt = &at
	}
	w.apply(node, st, ev)
}

// planned applies one node event as the planner publishes it (blocked, or
// cancelled before it started): no actor, no times.
func (w *wf) planned(node string, st dag.NodeState, ev events.NodeEvent) {
	w.f.t.Helper()
	w.apply(node, st, ev)
}

func (w *wf) apply(node string, st dag.NodeState, ev events.NodeEvent) {
	f := w.f
	f.t.Helper()
	f.seq++
	f.at = f.at.Add(time.Second)
	ev.Ref = events.Ref{WorkflowID: w.id, Workflow: w.name, Formula: w.formula, Host: w.host, Node: node, Operation: w.op, Generation: 1}
	ev.Status = st
	env, err := events.NewAt(fmt.Sprintf("ev-%d", f.seq), "test/1", f.at, &ev)
	if err != nil {
		f.t.Fatal(err)
	}
	f.p.Apply(context.Background(), []*consume.Event{{Envelope: env, Subject: events.HostLifecycle(w.host), Stream: f.seq}}, f.seq)
}

// ran applies a node's whole create or delete attempt: running, then its end.
func (w *wf) ran(node, spec string, end dag.NodeState) {
	w.f.t.Helper()
	w.node(node, dag.NodeRunning, events.NodeEvent{SpecHash: spec, Run: events.Run{Attempt: 1}})
	code := 0
	if end != dag.NodeSucceeded {
		code = 1
	}
	w.node(node, end, events.NodeEvent{SpecHash: spec, Run: events.Run{Attempt: 1, ExitCode: &code}})
}

// docs returns every per-host document, decoded two ways.
func (f *feed) docs() (raw []map[string]any, typed []events.HostNode) {
	var keys []string
	for k := range f.mem.Vals {
		if strings.HasPrefix(k, "host.") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		var m map[string]any
		var hn events.HostNode
		if err := json.Unmarshal(f.mem.Vals[k], &m); err != nil {
			f.t.Fatalf("%s: %v", k, err)
		}
		if err := json.Unmarshal(f.mem.Vals[k], &hn); err != nil {
			f.t.Fatalf("%s: %v", k, err)
		}
		raw, typed = append(raw, m), append(typed, hn)
	}
	return raw, typed
}

// doc finds the per-host document of a node of a composition (one whose
// documents name no composition match any).
func doc(t *testing.T, raw []map[string]any, workflow, formula, node string) map[string]any {
	t.Helper()
	for _, m := range raw {
		if m["formula"] == formula && m["node"] == node && (m["workflow"] == nil || m["workflow"] == workflow) {
			return m
		}
	}
	t.Fatalf("no per-host document of %s %s/%s", workflow, formula, node)
	return nil
}

// wantFields checks every field want names, in got: a JSON object written
// out in the test. null means absent (or null); nested objects are
// checked field by field the same way.
func wantFields(t *testing.T, what string, got map[string]any, want string) {
	t.Helper()
	var w map[string]any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %s: %v", want, err)
	}
	for _, d := range diff("", got, w) {
		t.Errorf("%s: %s", what, d)
	}
}

func diff(path string, got, want any) []string {
	wm, ok := want.(map[string]any)
	if !ok {
		if !reflect.DeepEqual(got, want) {
			return []string{fmt.Sprintf("%s = %v, want %v", path, js(got), js(want))}
		}
		return nil
	}
	gm, _ := got.(map[string]any)
	if gm == nil {
		return []string{fmt.Sprintf("%s = %v, want %v", path, js(got), js(want))}
	}
	var out []string
	for k, v := range wm {
		out = append(out, diff(strings.TrimPrefix(path+"."+k, "."), gm[k], v)...)
	}
	sort.Strings(out)
	return out
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// driftOf compares a composition of nodes f/<name> on host h (spec: the
// spec hash of run "<name>") with the per-host documents.
func driftOf(t *testing.T, name string, recorded []events.HostNode, nodes ...string) map[string]string {
	t.Helper()
	c := &dag.Composition{Name: name, Hosts: map[string]dag.Host{"h": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "f", Server: "h"}}}
	for _, n := range nodes {
		c.Formulas[0].Nodes = append(c.Formulas[0].Nodes, dag.Node{Name: n, Run: n})
	}
	p, err := dag.NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	q := events.DriftQueryOf(p)
	for _, it := range drift.Compare(&q, recorded).Items {
		got[it.Formula+"/"+it.Node] = it.Drift
	}
	return got
}

func spec(run string) string { return dag.SpecHash(&dag.Node{Run: run}) }

// Every transition of a node shows in its per-host document: a node
// killed by a cancel is cancelled, not running forever, and a node
// blocked in a later workflow is blocked, while what an earlier create
// put in place stays in place for drift.
func TestHostProjectionAppliesEveryTransition(t *testing.T) {
	f := newFeed(t)
	w1 := f.workflow("w", "wf-1", dag.OpCreate)
	w1.ran("a", spec("a"), dag.NodeSucceeded)
	// b is running when the workflow is cancelled: the executor kills it.
	w1.node("b", dag.NodeRunning, events.NodeEvent{SpecHash: spec("b"), Run: events.Run{Attempt: 1}})
	w1.node("b", dag.NodeCancelled, events.NodeEvent{SpecHash: spec("b"), Reason: "cancelled: killed on the host", Run: events.Run{Attempt: 1}})
	// c never started: the planner cancels it.
	w1.planned("c", dag.NodeCancelled, events.NodeEvent{SpecHash: spec("c"), Reason: "not started"})
	// d: failed, retried, succeeded.
	w1.node("d", dag.NodeRunning, events.NodeEvent{SpecHash: spec("d"), Run: events.Run{Attempt: 1}})
	w1.node("d", dag.NodeFailed, events.NodeEvent{SpecHash: spec("d"), WillRetry: true, Run: events.Run{Attempt: 1}})
	w1.node("d", dag.NodeRunning, events.NodeEvent{SpecHash: spec("d"), Run: events.Run{Attempt: 2}})
	w1.node("d", dag.NodeSucceeded, events.NodeEvent{SpecHash: spec("d"), Run: events.Run{Attempt: 2}})
	// A later workflow of the same composition: a's prerequisite fails.
	w2 := f.workflow("w", "wf-2", dag.OpCreate)
	w2.planned("a", dag.NodeBlocked, events.NodeEvent{SpecHash: spec("a"), Blocker: "dep"})

	raw, typed := f.docs()
	wantFields(t, "a", doc(t, raw, "w", "f", "a"), `{"status": "blocked", "blocker": "dep", "spec_hash": "`+spec("a")+`"}`)
	wantFields(t, "b", doc(t, raw, "w", "f", "b"), `{"status": "cancelled", "blocker": null}`)
	wantFields(t, "c", doc(t, raw, "w", "f", "c"), `{"status": "cancelled"}`)
	wantFields(t, "d", doc(t, raw, "w", "f", "d"), `{"status": "succeeded", "operation": "create", "workflow_id": "wf-1"}`)
	if n := len(doc(t, raw, "w", "f", "d")["log"].([]any)); n != 4 {
		t.Errorf("d's log has %d transitions, want 4", n)
	}
	// a was created and never touched since; b was cut short; c never ran.
	want := map[string]string{"f/a": "ok", "f/b": "missing", "f/c": "missing", "f/d": "ok"}
	if got := driftOf(t, "w", typed, "a", "b", "c", "d"); !reflect.DeepEqual(got, want) {
		t.Errorf("drift %v, want %v", got, want)
	}
}

// An attempt that waits for its host lock is announced again as running,
// without a start of its own: the document keeps the attempt's start.
func TestHostProjectionKeepsTheStartOfAWaitingAttempt(t *testing.T) {
	f := newFeed(t)
	w1 := f.workflow("w", "wf-1", dag.OpCreate)
	w1.node("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Run: events.Run{Attempt: 1}})
	started := f.at.Format(time.RFC3339) // the running event's start
	w1.planned("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Actor: "executor/x1", Reason: "waiting for workflow wf-0 (the same node runs there) on this host", Run: events.Run{Attempt: 1}})
	raw, _ := f.docs()
	wantFields(t, "a", doc(t, raw, "w", "f", "a"), `{"status": "running", "started_at": "`+started+`", "ended_at": null}`)
}

// Blocked and cancelled nodes name the workflow and operation that
// blocked or cancelled them, whoever published the transition.
func TestHostProjectionNamesTheWorkflowOfEveryTransition(t *testing.T) {
	f := newFeed(t)
	w1 := f.workflow("w", "wf-1", dag.OpCreate)
	w1.planned("a", dag.NodeBlocked, events.NodeEvent{SpecHash: spec("a"), Blocker: "dep"})
	w1.planned("b", dag.NodeCancelled, events.NodeEvent{SpecHash: spec("b"), Reason: "not started"})
	w1.ran("c", spec("c"), dag.NodeSucceeded)
	// A delete of the composition: c's prerequisite fails to go.
	w2 := f.workflow("w", "wf-2", dag.OpDelete)
	w2.planned("c", dag.NodeBlocked, events.NodeEvent{SpecHash: spec("c"), Blocker: "app"})

	raw, typed := f.docs()
	wantFields(t, "a", doc(t, raw, "w", "f", "a"), `{"status": "blocked", "workflow_id": "wf-1", "operation": "create", "blocker": "dep", "actor": null}`)
	wantFields(t, "b", doc(t, raw, "w", "f", "b"), `{"status": "cancelled", "workflow_id": "wf-1", "operation": "create", "actor": null}`)
	wantFields(t, "c", doc(t, raw, "w", "f", "c"), `{"status": "blocked", "workflow_id": "wf-2", "operation": "delete", "blocker": "app", "actor": null}`)
	// c was not deleted: still there.
	want := map[string]string{"f/a": "missing", "f/b": "missing", "f/c": "ok"}
	if got := driftOf(t, "w", typed, "a", "b", "c"); !reflect.DeepEqual(got, want) {
		t.Errorf("drift %v, want %v", got, want)
	}
}

// An operation: check run is recorded as a check: it never makes a node
// look created, and a check that could not run does not make a created
// node look missing.
func TestCheckRunIsNotACreate(t *testing.T) {
	f := newFeed(t)
	w1 := f.workflow("w", "wf-1", dag.OpCreate)
	w1.ran("b", spec("b"), dag.NodeSucceeded)
	w1.ran("c", spec("c"), dag.NodeSucceeded)
	chk := f.workflow("w", "wf-c", dag.OpCheck)
	// a was never created: its check says run would change something.
	chk.node("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Run: events.Run{Attempt: 1}})
	chk.node("a", dag.NodeSucceeded, events.NodeEvent{SpecHash: spec("a"), Check: events.CheckWouldChange, Run: events.Run{Attempt: 1}})
	// b is there: its check passes.
	chk.node("b", dag.NodeRunning, events.NodeEvent{SpecHash: spec("b"), Run: events.Run{Attempt: 1}})
	chk.node("b", dag.NodeSucceeded, events.NodeEvent{SpecHash: spec("b"), Check: events.CheckOK, Run: events.Run{Attempt: 1}})
	// c's check could not run (say, the host was unreachable).
	chk.node("c", dag.NodeRunning, events.NodeEvent{SpecHash: spec("c"), Run: events.Run{Attempt: 1}})
	chk.node("c", dag.NodeFailed, events.NodeEvent{SpecHash: spec("c"), Run: events.Run{Attempt: 1, Error: "cannot connect"}})

	raw, typed := f.docs()
	wantFields(t, "a", doc(t, raw, "w", "f", "a"), `{"status": "pending", "workflow_id": "", "operation": "",
		"check": {"status": "succeeded", "result": "would_change", "workflow_id": "wf-c", "spec_hash": "`+spec("a")+`"}}`)
	wantFields(t, "b", doc(t, raw, "w", "f", "b"), `{"status": "succeeded", "workflow_id": "wf-1", "operation": "create",
		"check": {"status": "succeeded", "result": "ok", "workflow_id": "wf-c"}}`)
	wantFields(t, "c", doc(t, raw, "w", "f", "c"), `{"status": "succeeded", "workflow_id": "wf-1", "operation": "create",
		"check": {"status": "failed", "result": null, "workflow_id": "wf-c", "error": "cannot connect"}}`)
	want := map[string]string{"f/a": "missing", "f/b": "ok", "f/c": "ok"}
	if got := driftOf(t, "w", typed, "a", "b", "c"); !reflect.DeepEqual(got, want) {
		t.Errorf("drift %v, want %v", got, want)
	}
}

// Two compositions that use the same formula ids on one host keep their
// own per-host documents, and the drift of one is not the other's.
func TestCompositionsKeepTheirOwnRecords(t *testing.T) {
	f := newFeed(t)
	one := f.workflow("one", "wf-1", dag.OpCreate)
	one.ran("a", spec("a"), dag.NodeSucceeded)
	one.ran("b", spec("b"), dag.NodeSucceeded)
	two := f.workflow("two", "wf-2", dag.OpCreate)
	two.ran("a", spec("a2"), dag.NodeSucceeded)
	two.ran("x", spec("x"), dag.NodeSucceeded)

	raw, typed := f.docs()
	if len(raw) != 4 {
		t.Errorf("%d per-host documents, want 4 (one: a, b; two: a, x)", len(raw))
	}
	wantFields(t, "one a", doc(t, raw, "one", "f", "a"), `{"workflow": "one", "workflow_id": "wf-1", "spec_hash": "`+spec("a")+`"}`)
	wantFields(t, "two a", doc(t, raw, "two", "f", "a"), `{"workflow": "two", "workflow_id": "wf-2", "spec_hash": "`+spec("a2")+`"}`)
	want := map[string]string{"f/a": "ok", "f/b": "ok"}
	if got := driftOf(t, "one", typed, "a", "b"); !reflect.DeepEqual(got, want) {
		t.Errorf("drift of one %v, want %v", got, want)
	}
	// two is compared with its own records only: its a was done with
	// another spec than "a" (one's, which would read ok), and it no longer
	// has x: orphaned in two, while nothing of one's is.
	want = map[string]string{"f/a": "changed", "f/x": "orphaned"}
	if got := driftOf(t, "two", typed, "a"); !reflect.DeepEqual(got, want) {
		t.Errorf("drift of two %v, want %v", got, want)
	}
}

// An attempt announced running again (while it waits for its host lock) is
// one attempt in the workflow's node document, and keeps its start.
func TestWaitingAttemptCountedOnce(t *testing.T) {
	f := newFeed(t)
	w1 := f.workflow("w", "wf-1", dag.OpCreate)
	at := f.at
	w1.node("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Run: events.Run{Attempt: 1, StartedAt: &at}})
	w1.planned("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Reason: "waiting for workflow wf-0 (the same node runs there) on this host", Run: events.Run{Attempt: 1}})
	f.docs()
	var nd events.NodeDoc
	if err := json.Unmarshal(f.mem.Vals[project.NodeDocKey("wf-1", "f", "a")], &nd); err != nil {
		t.Fatal(err)
	}
	if nd.Attempts != 1 || nd.StartedAt == nil {
		t.Fatalf("node document %+v: want 1 attempt with its start", nd)
	}
}

// A node's document says why it is as it is: the reason of its last
// transition (a skip naming the workflow that put the node in place), and
// none once a transition has none.
func TestNodeDocumentKeepsTheReason(t *testing.T) {
	f := newFeed(t)
	w1 := f.workflow("w", "wf-1", dag.OpCreate)
	doc := func() events.NodeDoc {
		t.Helper()
		var nd events.NodeDoc
		if err := json.Unmarshal(f.mem.Vals[project.NodeDocKey("wf-1", "f", "a")], &nd); err != nil {
			t.Fatal(err)
		}
		return nd
	}
	w1.planned("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Reason: "waiting for workflow wf-0 (the same node runs there) on this host", Run: events.Run{Attempt: 1}})
	if nd := doc(); nd.Reason != "waiting for workflow wf-0 (the same node runs there) on this host" {
		t.Fatalf("waiting: %+v", nd)
	}
	w1.node("a", dag.NodeSkipped, events.NodeEvent{SpecHash: spec("a"), Reason: "already succeeded with the same spec in workflow wf-0", Run: events.Run{Attempt: 1}})
	if nd := doc(); nd.Status != dag.NodeSkipped || nd.Reason != "already succeeded with the same spec in workflow wf-0" {
		t.Fatalf("skipped: %+v", nd)
	}
	w1.node("a", dag.NodeSucceeded, events.NodeEvent{SpecHash: spec("a"), Run: events.Run{Attempt: 2}})
	if nd := doc(); nd.Reason != "" {
		t.Fatalf("a transition without a reason keeps %q", nd.Reason)
	}
}

// A node event about another host than its formula's (its subject and
// data agree, so events.Admit lets it through) changes neither the
// workflow's documents nor any host's: a credential that may publish host
// events cannot make a node appear on a host it does not run on.
func TestNodeEventAboutAnotherHostIgnored(t *testing.T) {
	f := newFeed(t)
	w := f.workflow("app", "w1", dag.OpCreate)
	f.seq++
	fe := &events.FormulaEvent{Ref: events.Ref{WorkflowID: "w1", Workflow: "app", Formula: "f", Host: "h", Operation: dag.OpCreate, Generation: 1}, Status: dag.FormulaReady}
	env, err := events.NewAt("ready", "planner/1", f.at, fe)
	if err != nil {
		t.Fatal(err)
	}
	f.p.Apply(context.Background(), []*consume.Event{{Envelope: env, Subject: events.HostLifecycle("h"), Stream: f.seq}}, f.seq)
	forged := *w
	forged.host = "elsewhere"
	forged.ran("n", spec("true"), dag.NodeSucceeded)
	for k := range f.mem.Vals {
		if strings.Contains(k, "elsewhere") || strings.HasSuffix(k, ".n") {
			t.Errorf("a node event about another host was projected: %s", k)
		}
	}
	w.ran("n", spec("true"), dag.NodeFailed) // the real one still is
	_, typed := f.docs()
	if len(typed) != 1 || typed[0].Host != "h" || typed[0].Status != dag.NodeFailed {
		t.Fatalf("host documents %+v, want the real node on h, failed", typed)
	}
}

// A host whose name has dots is kept under its host token, with its name
// in the record; a later run of the composition on another host whose
// name has the same token (web_1 after web.1) starts that host's own
// record there rather than carry on the other's.
func TestHostProjectionOfDottedHostName(t *testing.T) {
	f := newFeed(t)
	w := f.workflow("app", "wf-1", dag.OpCreate)
	w.host = "web.1"
	w.ran("a", spec("a"), dag.NodeSucceeded)
	if _, ok := f.mem.Vals["host.web_1.app.f.a"]; !ok {
		t.Fatalf("no record under the host token: %v", slices.Collect(maps.Keys(f.mem.Vals)))
	}
	raw, _ := f.docs()
	wantFields(t, "web.1 a", doc(t, raw, "app", "f", "a"), `{"host": "web.1", "status": "succeeded", "workflow_id": "wf-1"}`)

	w2 := f.workflow("app", "wf-2", dag.OpCreate)
	w2.host = "web_1"
	w2.node("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Run: events.Run{Attempt: 1}})
	raw, typed := f.docs()
	if len(typed) != 1 {
		t.Fatalf("%d records, want the one of web_1", len(typed))
	}
	wantFields(t, "web_1 a", doc(t, raw, "app", "f", "a"), `{"host": "web_1", "status": "running", "workflow_id": "wf-2", "in_place": null}`)
}
