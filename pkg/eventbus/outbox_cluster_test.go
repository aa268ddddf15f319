package eventbus_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// transition is one event of a unit of work, with its message id.
type transition struct {
	subject string
	pl      events.Payload
	msgID   string
}

// formulaRun is what a formula of n nodes on host h1 emits: the formula
// running, each node running then succeeded, the formula succeeded.
func formulaRun(n int) []transition {
	ref := events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Operation: dag.OpCreate, Generation: 1}
	subject := events.HostLifecycle("h1")
	out := []transition{{subject, &events.FormulaEvent{Ref: ref, Status: dag.FormulaRunning}, "wf1|1|f|formula-running"}}
	for i := range n {
		r := ref
		r.Node = fmt.Sprintf("n%d", i)
		for _, st := range []dag.NodeState{dag.NodeRunning, dag.NodeSucceeded} {
			out = append(out, transition{subject, &events.NodeEvent{Ref: r, Status: st}, "wf1|1|f|" + r.Node + "|" + string(st) + "|1"})
		}
	}
	return append(out, transition{subject, &events.FormulaEvent{Ref: ref, Status: dag.FormulaSucceeded}, "wf1|1|f|formula-succeeded"})
}

// label names a stored event: "formula running", "n3 succeeded".
func label(t *testing.T, data []byte) string {
	t.Helper()
	if _, ev, err := events.Decode[events.NodeEvent](data); err == nil && ev.Node != "" {
		return ev.Node + " " + string(ev.Status)
	}
	_, ev, err := events.Decode[events.FormulaEvent](data)
	if err != nil {
		t.Fatal(err)
	}
	return "formula " + string(ev.Status)
}

// labels are the labels of a unit's transitions.
func labels(t *testing.T, pub *eventbus.Publisher, ts []transition) []string {
	t.Helper()
	var out []string
	for _, tr := range ts {
		switch p := tr.pl.(type) {
		case *events.NodeEvent:
			out = append(out, p.Node+" "+string(p.Status))
		case *events.FormulaEvent:
			out = append(out, "formula "+string(p.Status))
		}
	}
	return out
}

// storedLabels are the labels of every event in the event stream, in
// order, as an administrator reads them with js.
func storedLabels(ctx context.Context, t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	st, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return out
		}
		out = append(out, label(t, m.Data))
	}
}

// eventStream creates the event stream as the services do, with
// replicas and a duplicate window of window.
func eventStream(ctx context.Context, t *testing.T, js jetstream.JetStream, replicas int, window time.Duration) {
	t.Helper()
	for _, cfg := range eventbus.Streams(replicas) {
		if cfg.Name == events.StreamEvents {
			cfg.Duplicates = window
			if _, err := js.CreateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
}

// serviceConn connects to urls as identity id the way the services do
// (natsconn.Connect, reconnecting for ever).
func serviceConn(t *testing.T, keys *busauth.Keys, urls string, id events.Identity) *nats.Conn {
	t.Helper()
	creds, seed := keys.Credentials(id)
	nc, err := natsconn.Connect(natsconn.Options{URL: urls, Creds: creds, NKey: seed, InboxPrefix: id.InboxPrefix()}, "gantry-test", slog.New(slog.DiscardHandler), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// emitAll emits a unit's transitions, pause apart, and flushes, giving up
// after wait.
func emitAll(ctx context.Context, out *eventbus.Outbox, ts []transition, pause, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait+time.Duration(len(ts))*pause)
	defer cancel()
	for _, tr := range ts {
		out.Emit(ctx, tr.subject, tr.pl, tr.msgID)
		time.Sleep(pause)
	}
	return out.Flush(ctx)
}

// redo does a unit again, as a redelivered dispatch is, wait apart (past
// the duplicate window), until its events are stored.
func redo(ctx context.Context, t *testing.T, pub *eventbus.Publisher, run []transition, since time.Time, wait time.Duration) {
	t.Helper()
	for try := 2; ; try++ {
		time.Sleep(wait)
		if ctx.Err() != nil {
			t.Fatal("the unit's events were never stored")
		}
		out := pub.Outbox()
		out.Recheck(since) // what the executor does with a redelivered dispatch
		err := emitAll(ctx, out, run, 0, 20*time.Second)
		t.Logf("%.1fs: delivery %d: %v", time.Since(since).Seconds(), try, err)
		if err == nil {
			return
		}
	}
}

// assertOnceInOrder fails unless the event stream holds run's events,
// each once, in order.
func assertOnceInOrder(ctx context.Context, t *testing.T, admin jetstream.JetStream, pub *eventbus.Publisher, run []transition) {
	t.Helper()
	got, want := storedLabels(ctx, t, admin), labels(t, pub, run)
	if fmt.Sprint(got) == fmt.Sprint(want) {
		return
	}
	seen, twice, first := map[string]bool{}, []string{}, -1
	for i, l := range got {
		if seen[l] {
			twice = append(twice, l)
		}
		seen[l] = true
		if first < 0 && (i >= len(want) || want[i] != l) {
			first = i
		}
	}
	if first < 0 {
		first = len(got)
	}
	t.Fatalf("stream holds %d events for %d emitted; stored twice: %v; from position %d on it holds %v", len(got), len(want), twice, first, got[first:min(first+6, len(got))])
}

// A 3-node cluster loses 2 nodes (and so its quorum) for longer than the
// event stream's duplicate window while a formula emits its transitions;
// the unit fails and is done again, as a redelivered dispatch is, until
// its events are stored. The stream holds each transition once, in the
// order emitted.
func TestOutboxStoresOnceAndInOrderThroughAQuorumLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const window = 2 * time.Second
	c := natstest.StartCluster(t, 3)
	admin, err := jetstream.New(c.Connect(c.URLs(), busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	eventStream(ctx, t, admin, 3, window)
	leader := c.StreamLeader(ctx, admin, events.StreamEvents)
	nc := serviceConn(t, c.Keys, c.URLs(), events.Executor)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub := &eventbus.Publisher{JS: js, NC: nc, Source: "executor/test"}
	run := formulaRun(6)
	start := time.Now()
	var others []int
	for i := range 3 {
		if i != leader {
			others = append(others, i)
			c.Stop(i)
		}
	}
	t.Logf("%.1fs: stopped nodes %v, the stream's leader %d alone", time.Since(start).Seconds(), others, leader)
	err = emitAll(ctx, pub.Outbox(), run, 100*time.Millisecond, 20*time.Second)
	t.Logf("%.1fs: first delivery: %v", time.Since(start).Seconds(), err)
	time.Sleep(time.Until(start.Add(15 * time.Second)))
	for _, i := range others {
		c.Start(i)
	}
	t.Logf("%.1fs: nodes %v started again", time.Since(start).Seconds(), others)
	if err != nil {
		redo(ctx, t, pub, run, start, 3*time.Second)
	}
	assertOnceInOrder(ctx, t, admin, pub, run)
}

// A server stops while an outbox has events in flight (some stored, their
// acknowledgements lost), stays down longer than the duplicate window,
// and starts again; the unit is done again until its events are stored.
// The stream holds each event once, in the order emitted.
func TestOutboxStoresOnceAcrossAServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const window = time.Second
	ns := natstest.Start(t)
	admin, err := jetstream.New(ns.Connect(busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	eventStream(ctx, t, admin, 1, window)
	nc := serviceConn(t, ns.Keys, ns.URL(), events.Executor)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub := &eventbus.Publisher{JS: js, NC: nc, Source: "executor/test"}
	run := formulaRun(100)
	start := time.Now()
	out := pub.Outbox()
	uctx, ucancel := context.WithTimeout(ctx, 5*time.Second) // the first delivery gives up
	for i, tr := range run {
		if i == len(run)/2 {
			ns.Stop() // while the first half is in flight
		}
		out.Emit(uctx, tr.subject, tr.pl, tr.msgID)
	}
	err = out.Flush(uctx)
	ucancel()
	t.Logf("%.1fs: first delivery: %v", time.Since(start).Seconds(), err)
	time.Sleep(time.Until(start.Add(4 * window)))
	ns.Stop()
	ns.StartAgain()
	t.Logf("%.1fs: server started again", time.Since(start).Seconds())
	if err != nil {
		redo(ctx, t, pub, run, start, 2*window)
	}
	assertOnceInOrder(ctx, t, admin, pub, run)
}

// A publisher whose only server is down for longer than the duplicate
// window, while the rest of the cluster stores the unit's events from
// another publisher (a redelivery on another executor), sends nothing of
// what it emitted meanwhile once it is back: a service's connection keeps
// nothing to send while down, so no event of it is stored late, again,
// after the events that follow it.
func TestOutboxOfADisconnectedServiceSendsNothingLate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const window = time.Second
	c := natstest.StartCluster(t, 3)
	admin, err := jetstream.New(c.Connect(c.URLs(), busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	eventStream(ctx, t, admin, 3, window)
	x := (c.StreamLeader(ctx, admin, events.StreamEvents) + 1) % 3 // the first publisher's only server
	var rest []string
	for i := range 3 {
		if i != x {
			rest = append(rest, c.URL(i))
		}
	}
	a, b := serviceConn(t, c.Keys, c.URL(x), events.Executor), serviceConn(t, c.Keys, strings.Join(rest, ","), events.Executor)
	pubA, pubB := &eventbus.Publisher{JS: jsOf(t, a), NC: a, Source: "executor/a"}, &eventbus.Publisher{JS: jsOf(t, b), NC: b, Source: "executor/b"}
	run := formulaRun(3)
	start := time.Now()
	c.Stop(x)
	for a.IsConnected() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	err = emitAll(ctx, pubA.Outbox(), run, 0, 2*time.Second)
	t.Logf("%.1fs: publisher a, its server down: %v", time.Since(start).Seconds(), err)
	redo(ctx, t, pubB, run, start, 0)
	time.Sleep(time.Until(start.Add(4 * window)))
	c.Start(x)
	for (!a.IsConnected() || a.Stats().Reconnects == 0) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%.1fs: publisher a reconnected", time.Since(start).Seconds())
	time.Sleep(time.Second) // what a reconnect buffer held is stored by now
	assertOnceInOrder(ctx, t, admin, pubB, run)
}

func jsOf(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
