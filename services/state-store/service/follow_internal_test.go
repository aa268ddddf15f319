package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
	"github.com/nats-io/nats.go/jetstream"
)

// lockedBuffer is a bytes.Buffer for many writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

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

// A reader that delivers nothing while the event stream holds events past
// what it handed to the projection is replaced: the follow is stopped and
// started again, from where the projection got to, and the state-store
// says why. A reader that is merely idle (nothing past what it handed),
// or a projection busy applying, is left alone.
func TestStalledReaderIsReplaced(t *testing.T) {
	ns := natstest.Start(t)
	nc := ns.Connect(events.StateStore)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, err := eventbus.Open(ctx, nc, events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	follows := make(chan uint64, 10)
	f := &follower{js: js, p: &project.Projector{}, log: slog.New(slog.NewJSONHandler(&logs, nil)), stallAfter: 600 * time.Millisecond, watchEvery: 100 * time.Millisecond}
	f.followFn = func(fctx context.Context, from uint64) error {
		follows <- from
		<-fctx.Done() // delivers nothing, as a reader whose consumer cannot be re-created
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- f.run(ctx, 1) }()
	if from := <-follows; from != 1 {
		t.Fatalf("followed from %d, want 1", from)
	}
	// Idle: the stream holds nothing past what was handed.
	select {
	case from := <-follows:
		t.Fatalf("an idle reader was replaced (followed again from %d)", from)
	case <-time.After(1500 * time.Millisecond):
	}
	pub, err := jetstream.New(ns.Connect(events.Planner))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, events.WorkflowLifecycle("w1"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case from := <-follows:
		if from != 1 {
			t.Errorf("followed again from %d, want 1 (nothing applied)", from)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a reader that delivered nothing while the stream held an event was not replaced within 10s")
	}
	if !strings.Contains(logs.String(), "the event stream's reader delivered nothing while the stream holds more events") {
		t.Errorf("nothing logged about the stalled reader:\n%s", logs.String())
	}
	cancel()
	<-done
}

// The waits between tries to follow the event stream again start over
// once a follow delivered events: a reader lost in one outage does not
// wait the longest wait of the outage before it. Before, the waits only
// grew (until the stream was re-created): after a quorum loss, a reader
// lost in a partition waited 10 s before each try, and gantry status
// showed nothing of a run for 8 to more than 20 s of a 35 s partition
// while the run went on (cluster-chaos).
func TestFollowRetriesStartOverAfterAFollowThatDelivered(t *testing.T) {
	ns := natstest.Start(t)
	nc := ns.Connect(events.StateStore)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, err := eventbus.Open(ctx, nc, events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	f := &follower{js: js, p: &project.Projector{Hold: time.Hour}, log: slog.New(slog.NewJSONHandler(&logs, nil)),
		retry: 10 * time.Millisecond, maxRetry: 80 * time.Millisecond, stallAfter: time.Hour}
	n := 0
	last := make(chan struct{})
	f.followFn = func(fctx context.Context, from uint64) error {
		n++
		switch {
		case n == 6: // this follow delivers (the writes held), then the bus goes away again
			f.apply(fctx, nil, from+2)
		case n == 9:
			close(last)
			<-fctx.Done()
			return nil
		}
		return errors.New("nats: no heartbeat received")
	}
	done := make(chan error, 1)
	go func() { done <- f.run(ctx, 1) }()
	select {
	case <-last:
	case <-time.After(10 * time.Second):
		t.Fatal("not followed a ninth time within 10s")
	}
	cancel()
	<-done
	waits := retryWaits(logs.String())
	want := []string{"10ms", "20ms", "40ms", "80ms", "80ms", "10ms", "20ms", "40ms"}
	if !slices.Equal(waits, want) {
		t.Errorf("waits %q, want %q (the first again after the follow that delivered)", waits, want)
	}
}

// The waits grow while the bus stays away after a follow that delivered:
// what that follow handed the projection (its writes held, as they are
// for up to a second) is not progress of the tries after it, which fail
// before they follow.
func TestFollowRetriesGrowWhileTheBusStaysAway(t *testing.T) {
	ns := natstest.Start(t)
	nc := ns.Connect(events.StateStore)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, err := eventbus.Open(ctx, nc, events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	f := &follower{js: js, p: &project.Projector{Hold: time.Hour}, log: slog.New(slog.NewJSONHandler(&logs, nil)),
		retry: 10 * time.Millisecond, maxRetry: 80 * time.Millisecond, stallAfter: time.Hour}
	first := true
	f.followFn = func(fctx context.Context, from uint64) error {
		if first {
			first = false
			f.apply(fctx, nil, from+2) // delivered; its writes are held
			nc.Close()                 // then the bus goes away
		}
		return errors.New("nats: connection closed")
	}
	done := make(chan error, 1)
	go func() { done <- f.run(ctx, 1) }()
	var waits []string
	for deadline := time.Now().Add(5 * time.Second); len(waits) < 6 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		waits = retryWaits(logs.String())
	}
	cancel()
	<-done
	want := []string{"10ms", "20ms", "40ms", "80ms", "80ms", "80ms"}
	if len(waits) < 6 || !slices.Equal(waits[:6], want) {
		t.Errorf("waits %q, want %q (nothing delivered after the first follow)", waits, want)
	}
}

// retryWaits are the waits the follower logged, in order.
func retryWaits(logs string) []string {
	var waits []string
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var l struct {
			RetryIn string `json:"retry_in"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.RetryIn != "" {
			waits = append(waits, l.RetryIn)
		}
	}
	return waits
}

// A round that found the stream re-created (it rebased the projection and
// followed from the new stream's first event) and then failed goes on
// from there, not from the checkpoint it had before the rebase: once the
// new stream grew past that checkpoint, the old one was taken as current
// and the new stream's events below it were never projected.
func TestAFollowFailedAfterARebaseGoesOnFromTheNewStream(t *testing.T) {
	ns := natstest.Start(t)
	nc := ns.Connect(events.StateStore)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, err := eventbus.Open(ctx, nc, events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jetstream.New(ns.Connect(events.Planner))
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		for range n {
			if _, err := pub.Publish(ctx, events.WorkflowLifecycle("w1"), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(2) // the re-created stream: 2 events, below the checkpoint of 4
	var logs lockedBuffer
	p := &project.Projector{Store: &project.KVStore{JS: js, KV: kv}, Checkpoint: project.CheckpointKey, Hold: time.Hour}
	f := &follower{js: js, kv: kv, p: p, log: slog.New(slog.NewJSONHandler(&logs, nil)),
		retry: 10 * time.Millisecond, maxRetry: 80 * time.Millisecond, stallAfter: time.Hour}
	froms := make(chan uint64, 10)
	calls := 0
	f.followFn = func(fctx context.Context, from uint64) error {
		froms <- from
		if calls++; calls == 1 {
			publish(4) // the new stream grows past the old checkpoint meanwhile
			return errors.New("nats: no heartbeat received")
		}
		<-fctx.Done()
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- f.run(ctx, 5) }()
	var got []uint64
	for len(got) < 2 {
		select {
		case from := <-froms:
			got = append(got, from)
		case <-time.After(10 * time.Second):
			t.Fatalf("followed from %v only", got)
		}
	}
	cancel()
	<-done
	if got[0] != 1 || got[1] != 1 {
		t.Errorf("followed from %v, want [1 1]: the rebased projection goes on from the new stream's first event", got)
	}
}

// A server that rejoins after a partition answers for a moment as the
// stream leader it was, with the stream as it was at the cut: its last
// sequence is below the projection's checkpoint. The stream was not
// re-created (its creation time is the one followed): the state-store
// tries again, and does not rebase its projection. Before, it took that
// answer for a re-created stream and rebased (seen on the cluster stack:
// "the event stream was re-created ... checkpoint 693, last_seq 439").
func TestAStreamInfoBehindTheProjectionIsNoRecreation(t *testing.T) {
	ns := natstest.Start(t)
	nc := ns.Connect(events.StateStore)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, err := eventbus.Open(ctx, nc, events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	var logs lockedBuffer
	p := &project.Projector{Store: &project.KVStore{JS: js, KV: kv}, Checkpoint: project.CheckpointKey, Hold: time.Hour}
	f := &follower{js: js, kv: kv, p: p, log: slog.New(slog.NewJSONHandler(&logs, nil)),
		retry: 10 * time.Millisecond, maxRetry: 80 * time.Millisecond, stallAfter: time.Hour}
	infos := 0
	f.streamFn = func(context.Context) (time.Time, uint64, uint64, error) {
		infos++
		if infos == 2 { // the rejoining server, as the stream was at the cut
			return created, 1, 439, nil
		}
		return created, 1, 700, nil
	}
	froms := make(chan uint64, 10)
	calls := 0
	f.followFn = func(fctx context.Context, from uint64) error {
		froms <- from
		if calls++; calls == 1 {
			f.apply(fctx, nil, 693) // followed up to 693, then the partition
			return errors.New("nats: no heartbeat received")
		}
		<-fctx.Done()
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- f.run(ctx, 600) }()
	var got []uint64
	for len(got) < 2 {
		select {
		case from := <-froms:
			got = append(got, from)
		case <-time.After(10 * time.Second):
			t.Fatalf("followed from %v only", got)
		}
	}
	cancel()
	<-done
	if strings.Contains(logs.String(), "re-created") {
		t.Errorf("the state-store took a server behind for a re-created stream: %s", logs.String())
	}
	if got[1] != 600 && got[1] != 694 {
		t.Errorf("followed again from %d, want where the projection was", got[1])
	}
}

// A stream that did lose its end (a server that lost writes it had not
// synced, a restore from a backup) keeps its creation time: past
// BehindFor it is taken for what it is, and the projection is rebased and
// follows it from its first event. Waited on for good, the events stored
// after the loss, below the old checkpoint, would never be projected.
func TestAStreamThatLostItsEndIsRebasedAfterAWhile(t *testing.T) {
	ns := natstest.Start(t)
	nc := ns.Connect(events.StateStore)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js, err := eventbus.Open(ctx, nc, events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	var logs lockedBuffer
	p := &project.Projector{Store: &project.KVStore{JS: js, KV: kv}, Checkpoint: project.CheckpointKey, Hold: time.Hour}
	f := &follower{js: js, kv: kv, p: p, log: slog.New(slog.NewJSONHandler(&logs, nil)),
		retry: 5 * time.Millisecond, maxRetry: 10 * time.Millisecond, stallAfter: time.Hour, behindFor: 200 * time.Millisecond}
	infos := 0
	f.streamFn = func(context.Context) (time.Time, uint64, uint64, error) {
		if infos++; infos == 1 {
			return created, 1, 700, nil
		}
		return created, 1, 439, nil // the end is gone for good
	}
	froms := make(chan uint64, 10)
	calls := 0
	f.followFn = func(fctx context.Context, from uint64) error {
		froms <- from
		if calls++; calls == 1 {
			f.apply(fctx, nil, 693)
			return errors.New("nats: no heartbeat received")
		}
		<-fctx.Done()
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- f.run(ctx, 600) }()
	var got []uint64
	for len(got) < 2 {
		select {
		case from := <-froms:
			got = append(got, from)
		case <-time.After(10 * time.Second):
			t.Fatalf("followed from %v only", got)
		}
	}
	cancel()
	<-done
	if got[1] != 1 || !strings.Contains(logs.String(), "rebasing the projection") {
		t.Errorf("followed again from %d (stream infos %d), want 1 after a rebase", got[1], infos)
	}
	if infos < 3 {
		t.Errorf("rebased after %d stream infos: a stream behind is tried again first", infos)
	}
}
