package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
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

// gated holds every read of its records while its gate is set.
type gated[T any] struct {
	*eventbustest.MemoryBucket[T]
	mu   sync.Mutex
	gate chan struct{}
}

func (g *gated[T]) Get(ctx context.Context, k string) (T, uint64, error) {
	g.mu.Lock()
	c := g.gate
	g.mu.Unlock()
	if c != nil {
		<-c
	}
	return g.MemoryBucket.Get(ctx, k)
}

const composition = `{"name":"w","hosts":{"h1":{"transport":"local"}},"formulas":[{"id":"f","server":"h1","nodes":[{"name":"n","run":"true"}]}]}`

// A control request that finds the planner busy past its requester's wait
// fails, and is answered within that wait; the workflow is handed to the
// starter after the answer. Handed over before, the answer waited for the
// starter's try, which waits for the planner's work in hand: the
// requester saw a timeout.
func TestAControlRequestThatFindsThePlannerBusyIsAnsweredInTime(t *testing.T) {
	ns := natstest.Start(t)
	wf := &gated[engine.Record]{MemoryBucket: &eventbustest.MemoryBucket[engine.Record]{}}
	e := &engine.Engine{Workflows: wf, Runs: &eventbustest.MemoryBucket[engine.Snapshot]{},
		Nodes: &eventbustest.MemoryBucket[events.NodeRecord]{}, Out: &eventbustest.MemoryOutbox{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	reply, err := e.Submit(context.Background(), []byte(composition), false, events.Principal{Name: "operator"})
	if err != nil || reply.Status != "accepted" {
		t.Fatalf("submit: %v %+v", err, reply)
	}
	if err := e.Start(context.Background(), reply.WorkflowID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &starter{ctx: ctx, e: e, log: e.Log}
	served := ns.Connect(events.Planner)
	svc, err := api.Register(served, eventbus.ServiceSpec{Version: "0.0.1"}, e, e.Log, s.start)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if err := served.Flush(); err != nil {
		t.Fatal(err)
	}
	// The planner is busy: a unit of work waits on a read for 4 s.
	gate := make(chan struct{})
	wf.mu.Lock()
	wf.gate = gate
	wf.mu.Unlock()
	busy := make(chan struct{})
	go func() { _ = e.Start(context.Background(), reply.WorkflowID); close(busy) }()
	time.AfterFunc(4*time.Second, func() {
		wf.mu.Lock()
		wf.gate = nil
		wf.mu.Unlock()
		close(gate)
	})
	defer func() { <-busy }()
	time.Sleep(100 * time.Millisecond)
	m := &nats.Msg{Subject: events.WorkflowControl(reply.WorkflowID, events.VerbPause), Header: nats.Header{events.WaitHeader: {"1s"}}}
	began := time.Now()
	r, err := ns.Connect(events.Operator).RequestMsg(m, time.Second)
	if err != nil {
		t.Fatalf("no answer within the 1 s the requester waits (%.1f s): %v", time.Since(began).Seconds(), err)
	}
	if code := r.Header.Get(micro.ErrorCodeHeader); code == "" {
		t.Errorf("answered %s with no error while the planner was busy", r.Data)
	}
}

// A workflow handed to the starter again while it is tried in the
// background is not tried by a second loop: each failed control request
// added one, for as long as the planner ran.
func TestAWorkflowIsTriedAgainByOneLoop(t *testing.T) {
	down := errors.New("bucket unavailable")
	wf := &eventbustest.MemoryBucket[engine.Record]{}
	wf.Fail = func(op, _ string) error { return down }
	e := &engine.Engine{Workflows: wf, Runs: &eventbustest.MemoryBucket[engine.Snapshot]{},
		Nodes: &eventbustest.MemoryBucket[events.NodeRecord]{}, Out: &eventbustest.MemoryOutbox{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	s := &starter{ctx: ctx, e: e, log: e.Log}
	for range 3 {
		s.start("w1")
	}
	s.mu.Lock()
	n := len(s.retrying)
	s.mu.Unlock()
	if n != 1 {
		t.Errorf("%d workflows tried in the background, want 1", n)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		n = len(s.retrying)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background loop did not end with the planner")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
