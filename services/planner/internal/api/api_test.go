package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/gantry-dev/gantry/services/planner/internal/api"
	"github.com/gantry-dev/gantry/services/planner/internal/engine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// hanging are records whose JetStream never answers: every call waits
// until its context ends.
type hanging[T any] struct{ *eventbustest.MemoryBucket[T] }

func (hanging[T]) Get(ctx context.Context, _ string) (T, uint64, error) {
	var zero T
	<-ctx.Done()
	return zero, 0, ctx.Err()
}

func (hanging[T]) Put(ctx context.Context, _ string, _ T, _ uint64) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (hanging[T]) Keys(ctx context.Context, _ string) ([]string, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hanging[T]) Entries(ctx context.Context, _ string) (map[string]T, map[string]error, error) {
	<-ctx.Done()
	return nil, nil, ctx.Err()
}

func (hanging[T]) Revision(ctx context.Context) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

const composition = `{"name":"w","hosts":{"h1":{"transport":"local"}},"formulas":[{"id":"f","server":"h1","nodes":[{"name":"n","run":"true"}]}]}`

// TestSubmitFailsBeforeTheRequesterGivesUp: a planner whose JetStream
// does not answer answers a submit with its error within what the
// requester said it waits (events.WaitHeader); it held it 30 s, as long
// as the CLI waits by default, so the CLI saw a timeout and no reason.
func TestSubmitFailsBeforeTheRequesterGivesUp(t *testing.T) {
	ns := natstest.Start(t)
	workflows := hanging[engine.Record]{&eventbustest.MemoryBucket[engine.Record]{}}
	e := &engine.Engine{Workflows: workflows, Runs: &eventbustest.MemoryBucket[engine.Snapshot]{},
		Nodes: hanging[events.NodeRecord]{&eventbustest.MemoryBucket[events.NodeRecord]{}}, Out: &eventbustest.MemoryOutbox{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	served := ns.Connect(events.Planner)
	svc, err := api.Register(served, eventbus.ServiceSpec{Version: "0.0.1"}, e, e.Log, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	// The service's subscriptions reach the server before any request:
	// otherwise the first one may meet "no responders".
	if err := served.Flush(); err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: events.SubjectSubmit, Data: []byte(composition), Header: nats.Header{events.WaitHeader: {"3s"}}}
	began := time.Now()
	r, err := ns.Connect(events.Operator).RequestMsg(m, 3*time.Second)
	if err != nil {
		t.Fatalf("no answer within the 3 s the requester waits: %v", err)
	}
	if r.Header.Get(micro.ErrorCodeHeader) != "500" {
		t.Fatalf("answered %q %q %s, want the submit's failure", r.Header.Get(micro.ErrorCodeHeader), r.Header.Get(micro.ErrorHeader), r.Data)
	}
	t.Logf("answered after %.1f s: %s", time.Since(began).Seconds(), r.Header.Get(micro.ErrorHeader))
}

// fanOut is a composition of a group formula over hosts hosts and
// dependents formulas on one host that each depend on it: its plan lists
// every dependent's dependency on every instance, so the plan outgrows
// the workflow's record.
func fanOut(hosts, dependents int) []byte {
	var b strings.Builder
	b.WriteString("name: big\nhosts:\n")
	for i := 0; i < hosts; i++ {
		fmt.Fprintf(&b, "  h%d: {transport: local, labels: {role: web}}\n", i)
	}
	b.WriteString("groups:\n  web: {labels: {role: web}}\nformulas:\n  - id: app\n    group: web\n    nodes: [{name: n, run: \"true\"}]\n")
	for j := 0; j < dependents; j++ {
		fmt.Fprintf(&b, "  - {id: f%d, server: h0, depends_on: [app], nodes: [{name: n, run: \"true\"}]}\n", j)
	}
	return []byte(b.String())
}

// A composition whose record fits in a message but whose plan, the
// submission's reply, does not is refused before anything is stored,
// saying so; validating it says the same. (It was accepted, recorded and
// answered "500 reply: too large for one message", and never started:
// its submitter told it failed, the run left accepted.)
func TestSubmitWhosePlanDoesNotFitAReplyIsRefused(t *testing.T) {
	ns := natstest.Start(t)
	workflows := &eventbustest.MemoryBucket[engine.Record]{}
	e := &engine.Engine{Workflows: workflows, Runs: &eventbustest.MemoryBucket[engine.Snapshot]{},
		Nodes: &eventbustest.MemoryBucket[events.NodeRecord]{}, Out: &eventbustest.MemoryOutbox{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	served := ns.Connect(events.Planner)
	var started []string
	svc, err := api.Register(served, eventbus.ServiceSpec{Version: "0.0.1"}, e, e.Log, func(id string) { started = append(started, id) })
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if err := served.Flush(); err != nil {
		t.Fatal(err)
	}
	op := ns.Connect(events.Operator)
	body := fanOut(2000, 210)
	for _, subject := range []string{events.SubjectValidate, events.SubjectSubmit} {
		m := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{events.WaitHeader: {"30s"}}}
		r, err := op.RequestMsg(m, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		code, why := r.Header.Get(micro.ErrorCodeHeader), r.Header.Get(micro.ErrorHeader)
		if code != "400" || !strings.Contains(string(r.Data), "its plan is too large for a reply") {
			t.Fatalf("%s answered %q %q %.300s, want 400: the plan too large for a reply", subject, code, why, r.Data)
		}
	}
	keys, err := workflows.Keys(context.Background(), ">")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 || len(started) > 0 {
		t.Fatalf("refused, yet recorded %v and started %v", keys, started)
	}
}

// A control request that fails after it may have taken effect (its
// record written, then NATS away) is answered so, and its workflow handed
// to the starter, which loads it until it can: a retry whose dispatch was
// not stored began its generation only at the next event of the run or
// the planner's restart, and its requester was told only that it failed.
func TestAFailedControlRequestHandsItsWorkflowToTheStarter(t *testing.T) {
	ns := natstest.Start(t)
	runs := &eventbustest.MemoryBucket[engine.Snapshot]{}
	e := &engine.Engine{Workflows: &eventbustest.MemoryBucket[engine.Record]{}, Runs: runs,
		Nodes: &eventbustest.MemoryBucket[events.NodeRecord]{}, Out: &eventbustest.MemoryOutbox{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	reply, err := e.Submit(context.Background(), []byte(composition), false, events.Principal{Name: "operator"})
	if err != nil || reply.Status != "accepted" {
		t.Fatalf("submit: %v %+v", err, reply)
	}
	if err := e.Start(context.Background(), reply.WorkflowID); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	served := ns.Connect(events.Planner)
	svc, err := api.Register(served, eventbus.ServiceSpec{Version: "0.0.1"}, e, e.Log, func(id string) { started <- id })
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if err := served.Flush(); err != nil {
		t.Fatal(err)
	}
	down := fmt.Errorf("put: %w", nats.ErrConnectionClosed)
	runs.Fail = func(op, _ string) error {
		if op == "put" {
			return down
		}
		return nil
	}
	r, err := ns.Connect(events.Operator).Request(events.WorkflowControl(reply.WorkflowID, events.VerbPause), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, why := r.Header.Get(micro.ErrorCodeHeader), r.Header.Get(micro.ErrorHeader); code != "500" || !strings.Contains(why, "may have taken effect") {
		t.Errorf("answered %q %q, want 500 saying it may have taken effect", code, why)
	}
	select {
	case id := <-started:
		if id != reply.WorkflowID {
			t.Errorf("the starter got %s, want %s", id, reply.WorkflowID)
		}
	case <-time.After(5 * time.Second):
		t.Error("the workflow was not handed to the starter")
	}
}
