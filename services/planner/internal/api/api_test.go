package api_test

import (
	"context"
	"io"
	"log/slog"
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
