package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/gantry-dev/gantry/services/state-store/internal/api"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// hangingDocs is a projection whose JetStream never answers (a stream
// without a leader, a connection to a server cut off from the cluster):
// every read waits until its context ends.
type hangingDocs struct{}

func (hangingDocs) Get(ctx context.Context, _ string) ([]byte, uint64, error) {
	<-ctx.Done()
	return nil, 0, ctx.Err()
}

func (hangingDocs) Keys(ctx context.Context, _ string) ([]string, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hangingDocs) Values(ctx context.Context, _ string) (map[string][]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestReadsFailFastWithoutJetStream: a replica whose JetStream does not
// answer answers a read with an error before its requester gives up (it
// held it 20 s, past the CLI's tries, and its endpoint took nothing else
// meanwhile), and for a while answers the next reads with that error at
// once.
func TestReadsFailFastWithoutJetStream(t *testing.T) {
	ns := natstest.Start(t)
	hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	served := ns.Connect(events.StateStore)
	svc, err := api.Register(served, eventbus.ServiceSpec{Version: "0.0.1", Status: func() any { return nil }},
		hangingDocs{}, slog.Default(), nil, hang)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	// The endpoints' subscriptions reach the server before the first
	// request (another connection's request could find no responder).
	if err := served.Flush(); err != nil {
		t.Fatal(err)
	}
	viewer := ns.Connect(events.Viewer)
	ask := func(wait time.Duration) (*nats.Msg, time.Duration, error) {
		m := &nats.Msg{Subject: events.StateWorkflow, Data: []byte(`{"workflow_id":"w1"}`), Header: nats.Header{events.WaitHeader: {wait.String()}}}
		began := time.Now()
		r, err := viewer.RequestMsg(m, wait)
		return r, time.Since(began), err
	}
	r, took, err := ask(4 * time.Second)
	if err != nil {
		t.Fatalf("no answer within the 4 s the requester waits: %v", err)
	}
	if code := r.Header.Get(micro.ErrorCodeHeader); code != "503" {
		t.Fatalf("answered %q %q, want 503", code, r.Header.Get(micro.ErrorHeader))
	}
	t.Logf("first read: %s after %.1f s: %s", r.Header.Get(micro.ErrorCodeHeader), took.Seconds(), r.Header.Get(micro.ErrorHeader))
	r, took, err = ask(4 * time.Second)
	if err != nil || r.Header.Get(micro.ErrorCodeHeader) != "503" || took > time.Second {
		t.Fatalf("the next read: %v after %v (%v), want 503 at once", r, took, err)
	}
	t.Logf("next read: 503 after %v", took.Round(time.Millisecond))
}

// TestAShortWaitDoesNotFailOtherReads: a read whose requester waits less
// than a write's NoAnswerAfter (a viewer may say Gantry-Wait: 1ns) ends
// with its own error, and the replica, whose JetStream answers, goes on
// answering the next reads; it answered every read 503 for DownFor, so
// one such request every 5 s, on state.retry.* to every replica at once,
// kept every read of everyone failing.
func TestAShortWaitDoesNotFailOtherReads(t *testing.T) {
	ns := natstest.Start(t)
	serveStateBucket(t, ns)
	viewer := ns.Connect(events.Viewer)
	ask := func(subject string, wait time.Duration) (*nats.Msg, time.Duration, error) {
		m := &nats.Msg{Subject: subject, Data: []byte(`{"workflow_id":"w1"}`), Header: nats.Header{events.WaitHeader: {wait.String()}}}
		began := time.Now()
		r, err := viewer.RequestMsg(m, 4*time.Second)
		return r, time.Since(began), err
	}
	r, _, err := ask(events.StateRetry(events.StateWorkflow), time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a read waited for 1ns: %s %s", r.Header.Get(micro.ErrorCodeHeader), r.Header.Get(micro.ErrorHeader))
	r, took, err := ask(events.StateWorkflow, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := r.Header.Get(micro.ErrorCodeHeader); code != "404" {
		t.Fatalf("the next read, of a workflow there is not: %q %q after %v, want 404", code, r.Header.Get(micro.ErrorHeader), took.Round(time.Millisecond))
	}
	t.Logf("the next read: %s after %v", r.Header.Get(micro.ErrorCodeHeader), took.Round(time.Millisecond))
}

// TestACostlyQueryDoesNotFailOtherReads: a drift query of many hosts
// that runs out of its budget while JetStream answers each of its reads
// is answered 503 naming its own cost, and the replica goes on answering
// the next reads; it took the query's deadline for JetStream not
// answering and answered every read 503 for DownFor, so a viewer asking
// such a drift every 5 s kept every read of everyone failing.
func TestACostlyQueryDoesNotFailOtherReads(t *testing.T) {
	ns := natstest.Start(t)
	serveStateBucket(t, ns)
	// Each host is a read of its own: 20,000 of them take far more than
	// the 2 s the requester gives (about 1 ms each on a fast machine).
	q := events.DriftQuery{Workflow: "w"}
	for i := range 20000 {
		q.Nodes = append(q.Nodes, events.DriftWant{Host: fmt.Sprintf("h%d", i), Formula: "f", Node: "n", Spec: "x"})
	}
	body, packed, err := eventbus.EncodeBody(q)
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: events.StateDrift, Data: body, Header: nats.Header{events.WaitHeader: {"2s"}}}
	if packed {
		m.Header.Set(eventbus.EncodingHeader, eventbus.EncodingGzip)
	}
	viewer := ns.Connect(events.Viewer)
	r, err := viewer.RequestMsg(m, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	code, why := r.Header.Get(micro.ErrorCodeHeader), r.Header.Get(micro.ErrorHeader)
	if code != "503" || !strings.Contains(why, "did not finish within") {
		t.Fatalf("the drift of 20,000 hosts in 2 s: %q %q, want 503 naming the query's own cost", code, why)
	}
	t.Logf("the costly drift: %s %s", code, why)
	next := &nats.Msg{Subject: events.StateWorkflow, Data: []byte(`{"workflow_id":"w1"}`), Header: nats.Header{events.WaitHeader: {"4s"}}}
	r, err = viewer.RequestMsg(next, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := r.Header.Get(micro.ErrorCodeHeader); code != "404" {
		t.Fatalf("the next read, of a workflow there is not: %q %q, want 404", code, r.Header.Get(micro.ErrorHeader))
	}
}

// slowValues is a projection whose one-pass reads (Values) outlast any
// budget, a read of all of a huge host, while JetStream answers the rest.
type slowValues struct{ hangingDocs }

func (slowValues) Get(ctx context.Context, _ string) ([]byte, uint64, error) { return nil, 0, nil }

func (slowValues) Keys(ctx context.Context, _ string) ([]string, error) { return nil, nil }

// TestOneLongReadDoesNotFailOtherReads: a single read that outlasts its
// budget while JetStream answers (a probe read does) is answered 503
// naming its own cost, and does not make the next reads fail at once.
func TestOneLongReadDoesNotFailOtherReads(t *testing.T) {
	ns := natstest.Start(t)
	served := ns.Connect(events.StateStore)
	svc, err := api.Register(served, eventbus.ServiceSpec{Version: "0.0.1", Status: func() any { return nil }},
		slowValues{}, slog.Default(), nil, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if err := served.Flush(); err != nil {
		t.Fatal(err)
	}
	viewer := ns.Connect(events.Viewer)
	ask := func(subject, body string) *nats.Msg {
		m := &nats.Msg{Subject: subject, Data: []byte(body), Header: nats.Header{events.WaitHeader: {"2s"}}}
		r, err := viewer.RequestMsg(m, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := ask(events.StateHost, `{"host":"h1"}`)
	if code, why := r.Header.Get(micro.ErrorCodeHeader), r.Header.Get(micro.ErrorHeader); code != "503" || !strings.Contains(why, "did not finish within") {
		t.Fatalf("the long read: %q %q, want 503 naming its own cost", code, why)
	}
	r = ask(events.StateWorkflow, `{"workflow_id":"w1"}`)
	if code := r.Header.Get(micro.ErrorCodeHeader); code != "404" {
		t.Fatalf("the next read: %q %q, want 404 (no workflow w1), not the long read's failure", code, r.Header.Get(micro.ErrorHeader))
	}
}

// serveStateBucket serves the state-store's reads on ns from a real
// gantry_state bucket, caught up, until the test ends.
func serveStateBucket(t *testing.T, ns *natstest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := jetstream.New(ns.Connect(busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	var cfg jetstream.KeyValueConfig
	for _, c := range eventbus.KeyValues(1) {
		if c.Bucket == events.BucketState {
			cfg = c
		}
	}
	kv, err := admin.CreateKeyValue(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := ns.Connect(events.StateStore)
	svc, err := api.Register(served, eventbus.ServiceSpec{Version: "0.0.1", Status: func() any { return nil }},
		&project.KVStore{KV: kv}, slog.Default(), nil, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	// The endpoints' subscriptions reach the server before the first
	// request (another connection's request could find no responder).
	if err := served.Flush(); err != nil {
		t.Fatal(err)
	}
}
