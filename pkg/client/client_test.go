package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/devstack/devstacktest"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
)

// stack is the real NATS server (JetStream, auth on) with the four
// services running against it, as gantry dev runs them.
func stack(t *testing.T) *natstest.Server {
	t.Helper()
	ns := natstest.Start(t)
	devstacktest.Start(t, ns)
	cl := client.New(ns.Connect(events.Operator), 5*time.Second)
	deadline := time.Now().Add(60 * time.Second)
	for _, svc := range []events.Identity{events.Planner, events.StateStore} {
		for {
			err := cl.Ping(context.Background(), svc.ServiceName())
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not come up: %v", svc.ServiceName(), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return ns
}

const oneNode = `name: one
hosts: {me: {transport: local}}
formulas:
  - id: a
    server: me
    nodes: [{name: n, run: echo hello}]
`

// TestClientContract drives the real services through the client: typed
// replies, typed service errors, a refusal, and a feed of the run's
// events to its end.
func TestClientContract(t *testing.T) {
	ns := stack(t)
	ctx := context.Background()
	op := client.New(ns.Connect(events.Operator), 30*time.Second)

	_, err := op.Status(ctx, "no-such-workflow")
	var se *client.ServiceError
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &se) || se.Code != "404" || se.Subject != events.StateWorkflow {
		t.Fatalf("Status of an unknown workflow: %#v", err)
	}

	_, err = op.Submit(ctx, []byte("name: bad\nformulas: 3\n"), nil)
	rejected, ok := client.Rejected(err)
	if !errors.Is(err, client.ErrBadRequest) || !ok || rejected.Status != "rejected" || len(rejected.Errors) == 0 {
		t.Fatalf("Submit of a bad composition: %v, %+v", err, rejected)
	}

	v, err := op.Validate(ctx, []byte(oneNode))
	if err != nil || v.Status != "valid" {
		t.Fatalf("Validate: %+v, %v", v, err)
	}

	since := time.Now().Add(-time.Second)
	reply, err := op.Submit(ctx, []byte(oneNode), nil)
	if err != nil || reply.Status != "accepted" || reply.WorkflowID == "" {
		t.Fatalf("Submit: %+v, %v", reply, err)
	}
	id := reply.WorkflowID
	waitEnd(t, op, id, since)

	doc := waitDoc(t, op, id)
	if doc.Status != dag.WorkflowSucceeded || doc.Formulas["a"] == nil {
		t.Fatalf("Status: %+v", doc)
	}
	rows, err := op.List(ctx, 10)
	if err != nil || len(rows) != 1 || rows[0].WorkflowID != id {
		t.Fatalf("List: %+v, %v", rows, err)
	}
	nodes, err := op.Host(ctx, "me")
	if err != nil || len(nodes) != 1 || nodes[0].Node != "n" {
		t.Fatalf("Host: %+v, %v", nodes, err)
	}
	if _, err := op.Control(ctx, id, events.VerbPause, nil); !errors.As(err, &se) {
		t.Fatalf("pausing a finished workflow: %v, want a service error", err)
	}
	if _, err := op.Control(ctx, id, "explode", nil); err == nil {
		t.Fatal("a verb that is not a control verb was sent")
	}
	checkStores(t, op, doc)
}

// checkStores reads what the bus stores of a finished workflow: its run
// snapshot, the stores' sizes, its output lines; and asks the services
// for their stats.
func checkStores(t *testing.T, op *client.Client, doc *events.WorkflowDoc) {
	t.Helper()
	ctx := context.Background()
	if run, err := op.Run(ctx, doc.WorkflowID); err != nil || run.Generation != 1 {
		t.Errorf("Run: %+v, %v", run, err)
	}
	var re *client.RequestError
	if _, err := op.Run(ctx, "no-such-workflow"); !errors.Is(err, client.ErrNotFound) || !errors.As(err, &re) {
		t.Errorf("Run of an unknown workflow: %#v", err)
	}
	if err := op.JetStream(ctx); err != nil {
		t.Errorf("JetStream: %v", err)
	}
	sizes := op.StoreSizes(ctx)
	for _, st := range events.SizedStores {
		if sizes[st].Messages == 0 {
			t.Errorf("StoreSizes: %s has no messages: %v", st, sizes)
		}
	}
	span := events.WorkflowSpan(doc.CreatedAt, time.Now())
	lines, err := op.WorkflowMessages(ctx, events.StreamLogs, map[string]bool{doc.WorkflowID: true}, []events.Span{span})
	if err != nil || lines.Messages != 1 || lines.Messages > sizes[events.StreamLogs].Messages {
		t.Errorf("WorkflowMessages of the output lines: %+v, %v (the stream: %+v)", lines, err, sizes[events.StreamLogs])
	}
	stats, err := op.Stats(ctx, []string{events.Planner.ServiceName(), events.StateStore.ServiceName()})
	if err != nil || len(stats) != 2 {
		t.Errorf("Stats of the planner and the state-store: %d answers, %v", len(stats), err)
	}
}

// waitEnd follows the workflow's events until it ends, and checks it
// succeeded.
func waitEnd(t *testing.T, cl *client.Client, id string, since time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	feed, err := cl.Follow(ctx, client.FollowOptions{Stream: events.StreamEvents, Subjects: []string{events.WorkflowLifecycle(id)}, Since: since})
	if err != nil {
		t.Fatal(err)
	}
	for m, err := range feed.Messages() {
		if err != nil {
			t.Fatalf("the feed stopped before the workflow ended: %v", err)
		}
		var e events.WorkflowEvent
		if events.DecodeData(m.Envelope, &e) == nil && e.Status.Terminal() {
			if e.Status != dag.WorkflowSucceeded || m.Seq == 0 {
				t.Fatalf("workflow ended %s (seq %d)", e.Status, m.Seq)
			}
			return
		}
	}
}

// waitDoc reads the workflow's document once the state-store has seen
// its end.
func waitDoc(t *testing.T, cl *client.Client, id string) *events.WorkflowDoc {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		doc, err := cl.Status(context.Background(), id)
		if err == nil && doc.Status.Terminal() {
			return doc
		}
		if time.Now().After(deadline) {
			t.Fatalf("no finished document: %+v, %v", doc, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClientDeniedAtOnce: a viewer's submit is refused by the server,
// and the client says so at once (ErrDenied), long before its timeout;
// what it learns of one connection's refusals is its own.
func TestClientDeniedAtOnce(t *testing.T) {
	ns := stack(t)
	viewer := client.New(ns.Connect(events.Viewer), 30*time.Second)
	start := time.Now()
	_, err := viewer.Submit(context.Background(), []byte(oneNode), nil)
	var re *client.RequestError
	if !errors.Is(err, client.ErrDenied) || !errors.As(err, &re) || re.Subject != events.SubjectSubmit {
		t.Fatalf("a viewer's submit: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	// A viewer may read.
	if _, err := viewer.List(context.Background(), 5); err != nil {
		t.Fatalf("a viewer's list: %v", err)
	}
	// Another client, on another connection, is not told of it.
	op := client.New(ns.Connect(events.Operator), 30*time.Second)
	if _, err := op.Validate(context.Background(), []byte(oneNode)); err != nil {
		t.Fatalf("the operator's validate after the viewer's refusal: %v", err)
	}
}

// TestServiceErrorIs matches the sentinels by code.
func TestServiceErrorIs(t *testing.T) {
	for _, tc := range []struct {
		code string
		want error
		not  error
	}{
		{"404", client.ErrNotFound, client.ErrBadRequest},
		{"400", client.ErrBadRequest, client.ErrNotFound},
		{"503", client.ErrUnavailable, client.ErrNotFound},
		{"500", client.ErrUnavailable, client.ErrBadRequest},
	} {
		err := error(&client.ServiceError{Code: tc.code, Description: "d"})
		if !errors.Is(err, tc.want) || errors.Is(err, tc.not) || err.Error() != "d" {
			t.Errorf("code %s: Is(%v)=%v Is(%v)=%v", tc.code, tc.want, errors.Is(err, tc.want), tc.not, errors.Is(err, tc.not))
		}
	}
	re := &client.RequestError{Subject: "state.list", Err: nats.ErrTimeout}
	if !errors.Is(re, nats.ErrTimeout) || re.Error() != "state.list: nats: timeout" {
		t.Errorf("RequestError: %v", re)
	}
}
