package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
	"github.com/gantry-dev/gantry/services/state-store/service"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type env struct {
	t   *testing.T
	nc  *nats.Conn // the state-store's
	op  *nats.Conn // an operator's, for requests
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	pub *eventbus.Publisher
	// logs holds every state-store's log records.
	logs syncBuffer
}

// syncBuffer is a bytes.Buffer for many writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func setup(t *testing.T) *env {
	t.Helper()
	ns := natstest.Start(t)
	nc := ns.Connect(events.StateStore)
	if _, err := eventbus.Open(context.Background(), nc, events.StateStore, 1, nil); err != nil {
		t.Fatal(err)
	}
	// Events are published as the services that publish them would.
	for _, id := range []events.Identity{events.Planner, events.Executor, events.HealthGate} {
		if _, err := eventbus.Open(context.Background(), ns.Connect(id), id, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	ajs, _ := jetstream.New(ns.Connect(busauth.Admin))
	kv, err := ajs.KeyValue(context.Background(), events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, nc: nc, op: ns.Connect(events.Operator), js: ajs, kv: kv, pub: &eventbus.Publisher{JS: ajs, Source: "test/1"}}
}

// start runs a state-store until the returned stop is called, and
// returns the stream sequence it resumed from.
func (e *env) start(name string) (stop func(), from uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := make(chan []byte, 100)
	go func() {
		done <- service.Run(ctx, e.nc, service.Config{Instance: name, Log: slog.New(slog.NewJSONHandler(io.MultiWriter(chanWriter(logs), &e.logs), nil))})
	}()
	for from == 0 {
		select {
		case l := <-logs:
			var rec struct {
				Msg  string `json:"msg"`
				From uint64 `json:"from_seq"`
			}
			if json.Unmarshal(l, &rec) == nil && rec.Msg == "state-store started" {
				from = rec.From
			}
		case <-time.After(10 * time.Second):
			e.t.Fatalf("%s did not start", name)
		}
	}
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("%s: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			e.t.Fatalf("%s did not stop", name)
		}
	}, from
}

// chanWriter hands each log record to a channel, dropping it when full.
type chanWriter chan []byte

func (c chanWriter) Write(b []byte) (int, error) {
	select {
	case c <- append([]byte(nil), b...):
	default:
	}
	return len(b), nil
}

func (e *env) publish(subject string, pl events.Payload, id string) {
	e.t.Helper()
	if err := e.pub.Publish(context.Background(), subject, pl, id); err != nil {
		e.t.Fatal(err)
	}
}

// run publishes a whole workflow's events: n formulas of two nodes on
// three hosts, each node running then succeeded.
func (e *env) run(id string, n int) (published int) {
	ctx := context.Background()
	now := time.Now().UTC()
	wf := events.Ref{WorkflowID: id, Workflow: "w", Operation: dag.OpCreate, Generation: 1}
	e.publish(events.WorkflowLifecycle(id), &events.WorkflowEvent{Ref: wf, Status: dag.WorkflowAccepted, TotalNodes: 2 * n, Formulas: map[events.FormulaState]int{dag.FormulaPending: n}}, id+"|accepted")
	e.publish(events.WorkflowLifecycle(id), &events.WorkflowEvent{Ref: wf, Status: dag.WorkflowRunning}, id+"|running")
	published = 2
	for i := range n {
		f := wf
		f.Formula, f.Host = fmt.Sprintf("f%d", i), fmt.Sprintf("h%d", i%3)
		for _, st := range []dag.FormulaState{dag.FormulaReady, dag.FormulaRunning} {
			e.publish(events.HostLifecycle(f.Host), &events.FormulaEvent{Ref: f, Status: st}, id+"|"+f.Formula+"|"+string(st))
			published++
		}
		for _, node := range []string{"a", "b"} {
			r := f
			r.Node = node
			e.publish(events.HostLifecycle(f.Host), &events.NodeEvent{Ref: r, Status: dag.NodeRunning, Run: events.Run{Attempt: 1, StartedAt: &now}, SpecHash: "h-" + node}, id+"|"+f.Formula+"|"+node+"|running")
			code := 0
			e.publish(events.HostLifecycle(f.Host), &events.NodeEvent{Ref: r, Status: dag.NodeSucceeded, Run: events.Run{Attempt: 1, StartedAt: &now, EndedAt: &now, ExitCode: &code}, SpecHash: "h-" + node}, id+"|"+f.Formula+"|"+node+"|succeeded")
			published += 2
		}
		e.publish(events.HostLifecycle(f.Host), &events.FormulaEvent{Ref: f, Status: dag.FormulaSucceeded, Run: events.Run{EndedAt: &now}}, id+"|"+f.Formula+"|succeeded")
		published++
	}
	// Something that is not an event: skipped, and it does not stop the
	// projection.
	if _, err := e.js.Publish(ctx, events.HostLifecycle("h0"), []byte("not json")); err != nil {
		e.t.Fatal(err)
	}
	e.publish(events.WorkflowLifecycle(id), &events.WorkflowEvent{Ref: wf, Status: dag.WorkflowSucceeded, Run: events.Run{EndedAt: &now}}, id+"|succeeded")
	return published + 2
}

func (e *env) lastSeq() uint64 {
	s, err := e.js.Stream(context.Background(), events.StreamEvents)
	if err != nil {
		e.t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// doc reads a projection document by its key (nil when absent), as the
// state-store keeps it (project.Pages).
func (e *env) doc(key string) ([]byte, error) {
	b, _, err := (&project.Pages{Raw: &project.KVStore{JS: e.js, KV: e.kv}}).Get(context.Background(), key)
	if err == nil && b == nil {
		err = fmt.Errorf("%s: %w", key, jetstream.ErrKeyNotFound)
	}
	return b, err
}

func (e *env) checkpoint() uint64 {
	v, err := e.kv.Get(context.Background(), project.CheckpointKey)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(string(v.Value()), 10, 64)
	return n
}

func (e *env) caughtUp() {
	e.t.Helper()
	last := e.lastSeq()
	for deadline := time.Now().Add(10 * time.Second); e.checkpoint() < last; {
		if time.Now().After(deadline) {
			e.t.Fatalf("checkpoint %d, stream at %d", e.checkpoint(), last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writes counts the gantry_state bucket's stored writes so far.
func (e *env) writes() uint64 {
	s, err := e.js.Stream(context.Background(), "KV_"+events.BucketState)
	if err != nil {
		e.t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// check asserts every node of the workflow counted each transition once,
// and that the projection equals a replay of the stream.
func (e *env) check(id string, n int) {
	e.t.Helper()
	ctx := context.Background()
	var wd events.WorkflowDoc
	if v, err := e.kv.Get(ctx, project.WorkflowDocKey(id)); err != nil || json.Unmarshal(v.Value(), &wd) != nil || wd.Status != dag.WorkflowSucceeded {
		e.t.Errorf("%s: workflow document %+v, %v", id, wd, err)
	}
	for i := range n {
		for _, node := range []string{"a", "b"} {
			key := project.NodeDocKey(id, fmt.Sprintf("f%d", i), node)
			var nd events.NodeDoc
			v, err := e.doc(key)
			if err != nil || json.Unmarshal(v, &nd) != nil {
				e.t.Fatalf("%s: %v", key, err)
			}
			if nd.Status != dag.NodeSucceeded || nd.Transitions != 2 || nd.Attempts != 1 {
				e.t.Errorf("%s: status %s, %d transitions, %d attempts; want succeeded, 2, 1", key, nd.Status, nd.Transitions, nd.Attempts)
			}
		}
	}
	m, err := e.op.Request(events.StateRebuild, []byte(`{"check_only":true}`), 10*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	var rep struct {
		Keys      int      `json:"keys"`
		UpTo      uint64   `json:"up_to"`
		Differing []string `json:"differing"`
	}
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Keys == 0 || len(rep.Differing) != 0 {
		e.t.Errorf("rebuild check: %s (%v)", m.Data, err)
	}
}

// TestFollowInBatches: the state-store applies the stream in batches (one
// write per document a batch changed), resumes from its checkpoint, counts
// each transition once when it applies events again, skips what does not
// parse, and two of them at once converge on the same projection.
func TestFollowInBatches(t *testing.T) {
	e := setup(t)
	const n = 10
	published := e.run("w1", n)

	// Everything is already in the stream: it comes in large batches.
	stop, from := e.start("ss-1")
	if from != 1 {
		t.Errorf("a first start resumed from %d, not 1", from)
	}
	e.caughtUp()
	e.check("w1", n)
	// One write per event would be a write for each workflow and formula
	// event and two for each node event; one per value, the summary, the
	// pages of its formulas and nodes and the per-host node documents.
	perEvent := uint64(3 + 3*n + 2*4*n)
	docs := uint64(1 + project.PagesFor(n, 2*n) + 2*n)
	if w := e.writes(); w >= perEvent || w < docs {
		t.Errorf("%d events made %d writes; one per document is %d, one per event %d", published, w, docs, perEvent)
	} else {
		t.Logf("%d events, %d writes (documents %d, one write per event %d)", published, w, docs, perEvent)
	}

	// Resumed from the checkpoint: only the new events are applied.
	stop()
	before, at := e.writes(), e.checkpoint()
	e.run("w2", 3)
	if stop, from = e.start("ss-1"); from != at+1 {
		t.Errorf("resumed from %d, not after the checkpoint %d", from, at)
	}
	e.caughtUp()
	e.check("w2", 3)
	e.check("w1", n)
	if w := e.writes() - before; w > uint64(1+3+2*2*3)+3 {
		t.Errorf("after a restart, %d writes for a 3-formula workflow: w1 was applied again", w)
	}

	// A checkpoint lost (a crash between the documents and it): every
	// event comes again, and none is counted twice.
	stop()
	if _, err := e.kv.Put(context.Background(), project.CheckpointKey, []byte("0")); err != nil {
		t.Fatal(err)
	}
	if stop, from = e.start("ss-1"); from != 1 {
		t.Errorf("resumed from %d, not 1, after the checkpoint was reset", from)
	}
	e.caughtUp()
	e.check("w1", n)
	e.check("w2", 3)

	// Two followers at once, from the start, while events arrive: they
	// write the same documents, and the revisions keep them consistent.
	stop()
	if _, err := e.kv.Put(context.Background(), project.CheckpointKey, []byte("0")); err != nil {
		t.Fatal(err)
	}
	stop1, _ := e.start("ss-1")
	stop2, _ := e.start("ss-2")
	e.run("w3", n)
	e.caughtUp()
	for _, id := range []string{"w1", "w3"} {
		e.check(id, n)
	}
	e.check("w2", 3)
	stop2()

	// A read waits for what was stored before it: whoever saw a workflow
	// end on the stream reads it ended.
	e.run("w4", 2)
	m, err := e.op.Request(events.StateWorkflow, []byte(`{"workflow_id":"w4"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var wd events.WorkflowDoc
	if err := json.Unmarshal(m.Data, &wd); err != nil || wd.Status != dag.WorkflowSucceeded || len(wd.Formulas) != 2 {
		t.Errorf("state.workflow right after the last event: %s", m.Data)
	}
	for id, f := range wd.Formulas {
		if f.Status != dag.FormulaSucceeded || len(f.Nodes) != 2 {
			t.Errorf("formula %s: %+v", id, f)
		}
	}
	stop1()
}

// TestUnpagedWorkflowOnTwoReplicas: a workflow of more documents than
// the state-store keeps in pages (1,400 formulas of 2 nodes: 4,200),
// projected by two replicas at once, keeps each document a value of its
// own: every transition counted once, state.workflow whole, a rebuild
// check finding nothing differing, and no page written.
func TestUnpagedWorkflowOnTwoReplicas(t *testing.T) {
	e := setup(t)
	const n = 1400
	if project.PagesFor(n, 2*n) != project.Unpaged {
		t.Fatalf("PagesFor(%d, %d) = %d: the test wants an unpaged workflow", n, 2*n, project.PagesFor(n, 2*n))
	}
	stop1, _ := e.start("ss-1")
	defer stop1()
	stop2, _ := e.start("ss-2")
	defer stop2()
	e.run("big", n)
	e.caughtUp()
	e.check("big", n)
	keys, err := e.kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var pages, own int
	for k := range keys.Keys() {
		switch {
		case strings.HasPrefix(k, "wf-page.") || strings.HasPrefix(k, "wf-doc."):
			pages++
		case strings.HasPrefix(k, project.FormulaDocPrefix("big")):
			own++
		}
	}
	if pages != 0 || own != 3*n {
		t.Errorf("%d pages and values they name, %d documents at their own keys; want 0 and %d", pages, own, 3*n)
	}
	m, err := e.op.Request(events.StateWorkflow, []byte(`{"workflow_id":"big"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	body, err := eventbus.BodyOf(m) // a large reply comes compressed
	if err != nil {
		t.Fatal(err)
	}
	var wd events.WorkflowDoc
	if err := json.Unmarshal(body, &wd); err != nil || wd.Status != dag.WorkflowSucceeded || len(wd.Formulas) != n {
		t.Errorf("state.workflow: status %s, %d formulas (%v); want succeeded, %d", wd.Status, len(wd.Formulas), err, n)
	}
}

// TestCheckpointBehindPurgedStream: events the state-store had not applied
// yet are purged while it is down. It starts again past them, says which
// are gone, answers reads and state.rebuild at once (with what could not
// be rebuilt) instead of waiting for events that will never come, and
// projects new events as before.
func TestCheckpointBehindPurgedStream(t *testing.T) {
	e := setup(t)
	e.run("w1", 2)
	stop, _ := e.start("ss-1")
	e.caughtUp()
	stop()
	applied := e.checkpoint()
	e.run("w2", 2) // never applied: purged first
	st, err := e.js.Stream(context.Background(), events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	last := e.lastSeq()
	stop, from := e.start("ss-1")
	defer stop()
	if from != applied+1 {
		t.Errorf("resumed from %d, not after the checkpoint %d", from, applied)
	}
	gone := fmt.Sprintf(`"first_missing":%d,"last_missing":%d`, applied+1, last)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(e.logs.String(), gone) {
		if time.Now().After(deadline) {
			t.Fatalf("the state-store did not log the events it lost (%s):\n%s", gone, e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A read does not wait for events that are gone.
	began := time.Now()
	if _, err := e.op.Request(events.StateList, nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("state.list took %s: it waited for purged events", d)
	}
	for _, check := range []bool{true, false} {
		b, _ := json.Marshal(events.RebuildQuery{CheckOnly: check})
		m, err := e.op.Request(events.StateRebuild, b, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep events.RebuildReport
		if err := json.Unmarshal(m.Data, &rep); err != nil || m.Header.Get("Nats-Service-Error") != "" {
			t.Fatalf("rebuild (check %v): %s %s", check, m.Header.Get("Nats-Service-Error"), m.Data)
		}
		if rep.Lost == "" || rep.FirstSeq != last+1 || len(rep.Kept) == 0 || rep.Rewritten {
			t.Errorf("rebuild (check %v) after the purge: %+v", check, rep)
		}
	}

	// New events are projected; what w1 was stays.
	e.run("w3", 2)
	e.caughtUp()
	for _, id := range []string{"w1", "w3"} {
		var wd events.WorkflowDoc
		if v, err := e.kv.Get(context.Background(), project.WorkflowDocKey(id)); err != nil || json.Unmarshal(v.Value(), &wd) != nil || wd.Status != dag.WorkflowSucceeded {
			t.Errorf("%s: %+v, %v", id, wd, err)
		}
	}
}

// TestRebuildRefusesWhatTheLiveProjectionRefuses: an event that did not
// come the way its type comes (a node's success published on a health
// subject, as the health-gate's credential could; one about another host
// than its subject's) is refused by a rebuild's replay as it is by the
// live projection: a rebuild finds nothing differing, and rewrites
// nothing from it.
func TestRebuildRefusesWhatTheLiveProjectionRefuses(t *testing.T) {
	e := setup(t)
	e.run("w1", 1)
	now := time.Now().UTC()
	code := 0
	forged := events.Ref{WorkflowID: "w1", Workflow: "w", Operation: dag.OpCreate, Generation: 1, Formula: "f0", Host: "h0", Node: "forged"}
	e.publish(events.HostHealth("h0"), &events.NodeEvent{Ref: forged, Status: dag.NodeSucceeded, Run: events.Run{Attempt: 1, StartedAt: &now, EndedAt: &now, ExitCode: &code}}, "forged|1")
	elsewhere := forged
	elsewhere.Node = "elsewhere"
	e.publish(events.HostLifecycle("h1"), &events.NodeEvent{Ref: elsewhere, Status: dag.NodeSucceeded, Run: events.Run{Attempt: 1, StartedAt: &now, EndedAt: &now, ExitCode: &code}}, "forged|2")
	stop, _ := e.start("ss-1")
	defer stop()
	e.caughtUp()
	for _, node := range []string{"forged", "elsewhere"} {
		if _, err := e.doc(project.NodeDocKey("w1", "f0", node)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("the live projection applied the misrouted event about node %s", node)
		}
	}
	for _, check := range []bool{true, false} {
		b, _ := json.Marshal(events.RebuildQuery{CheckOnly: check})
		m, err := e.op.Request(events.StateRebuild, b, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep events.RebuildReport
		if err := json.Unmarshal(m.Data, &rep); err != nil || m.Header.Get("Nats-Service-Error") != "" {
			t.Fatalf("rebuild (check %v): %s %s", check, m.Header.Get("Nats-Service-Error"), m.Data)
		}
		if len(rep.Differing) != 0 || rep.Rewritten {
			t.Errorf("rebuild (check %v): %+v, want nothing differing: the replay applied what the live projection refused", check, rep)
		}
	}
	for _, node := range []string{"forged", "elsewhere"} {
		if _, err := e.doc(project.NodeDocKey("w1", "f0", node)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("after a rebuild, the projection holds the misrouted event about node %s", node)
		}
	}
}
