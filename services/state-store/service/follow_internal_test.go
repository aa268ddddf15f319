package service

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// A follow that ends while the state-store still runs (the client's
// iterator closed under it in a quorum loss or a partition) is started
// again, from where the projection got to: the state-store does not end
// (it used to return nil, and the process exited with status 0).
func TestFollowEndedIsFollowedAgain(t *testing.T) {
	ns := natstest.Start(t)
	nc := ns.Connect(events.StateStore)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, err := eventbus.Open(ctx, nc, events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	var froms []uint64
	third := make(chan struct{})
	f := &follower{js: js, p: &project.Projector{}, log: slog.New(slog.NewJSONHandler(&logs, nil))}
	f.followFn = func(fctx context.Context, from uint64) error {
		mu.Lock()
		froms = append(froms, from)
		n := len(froms)
		mu.Unlock()
		if n < 3 {
			return nil // the iterator closed: nothing more is delivered
		}
		close(third)
		<-fctx.Done()
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- f.run(ctx, 1) }()
	select {
	case err := <-done:
		t.Fatalf("the follower ended (err %v) after its follow ended; it must follow again", err)
	case <-third:
	case <-time.After(10 * time.Second):
		t.Fatal("not followed a third time within 10s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("stopped with %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the follower did not stop within 5s of its context")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(froms) != 3 || froms[1] != 1 || froms[2] != 1 {
		t.Errorf("followed from %v, want [1 1 1] (nothing applied in between)", froms)
	}
	if !strings.Contains(logs.String(), "cannot follow the event stream; trying again") {
		t.Errorf("nothing logged about the follow that ended:\n%s", logs.String())
	}
}
