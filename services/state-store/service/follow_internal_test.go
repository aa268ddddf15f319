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
	"github.com/nats-io/nats.go"
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

// followTest is a follower of the event stream of a real JetStream (an
// embedded server), with short waits, a follow of its own (follow) and
// what it logs.
type followTest struct {
	t      *testing.T
	f      *follower
	ns     *natstest.Server
	nc     *nats.Conn // the follower's connection
	logs   *lockedBuffer
	ctx    context.Context
	cancel context.CancelFunc
	done   chan error
	froms  chan uint64 // where each follow began
}

func newFollowTest(t *testing.T) *followTest {
	ns := natstest.Start(t)
	nc := ns.Connect(events.StateStore)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	js, err := eventbus.Open(ctx, nc, events.StateStore, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	p := &project.Projector{Store: &project.KVStore{JS: js, KV: kv}, Checkpoint: project.CheckpointKey, Hold: time.Hour}
	f := &follower{js: js, kv: kv, p: p, log: slog.New(slog.NewJSONHandler(logs, nil)),
		retry: 10 * time.Millisecond, maxRetry: 80 * time.Millisecond, stallAfter: time.Hour}
	return &followTest{t: t, f: f, ns: ns, nc: nc, logs: logs, ctx: ctx, cancel: cancel, froms: make(chan uint64, 100)}
}

// run runs the follower from from, each follow of it being follow's n-th
// call (from 1), which returns what the follow ends with.
func (ft *followTest) run(from uint64, follow func(fctx context.Context, from uint64, n int) error) {
	n := 0
	ft.f.followFn = func(fctx context.Context, from uint64) error {
		n++
		ft.froms <- from
		return follow(fctx, from, n)
	}
	ft.done = make(chan error, 1)
	go func() { ft.done <- ft.f.run(ft.ctx, from) }()
}

// follows are where the first n follows began (the test fails after
// 10 s without them).
func (ft *followTest) follows(n int) []uint64 {
	var got []uint64
	for len(got) < n {
		select {
		case from := <-ft.froms:
			got = append(got, from)
		case <-time.After(10 * time.Second):
			ft.t.Fatalf("followed from %v only", got)
		}
	}
	return got
}

// stop ends the follower and waits for it.
func (ft *followTest) stop() {
	ft.cancel()
	<-ft.done
}

// until is fn's first result that says done, or its last after 5 s.
func until[T any](fn func() (T, bool)) T {
	var v T
	var done bool
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if v, done = fn(); done {
			break
		}
	}
	return v
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

var errNoHeartbeat = errors.New("nats: no heartbeat received")

// The waits between tries to follow the event stream again start over
// once a follow delivered events: a reader lost in one outage does not
// wait the longest wait of the outage before it. Before, the waits only
// grew (until the stream was re-created): after a quorum loss, a reader
// lost in a partition waited 10 s before each try, and gantry status
// showed nothing of a run for 8 to more than 20 s of a 35 s partition
// while the run went on (cluster-chaos).
func TestFollowRetriesStartOverAfterAFollowThatDelivered(t *testing.T) {
	ft := newFollowTest(t)
	ft.run(1, func(fctx context.Context, from uint64, n int) error {
		switch n {
		case 6: // this follow delivers (the writes held), then the bus goes away again
			ft.f.apply(fctx, nil, from+2)
		case 9:
			<-fctx.Done()
			return nil
		}
		return errNoHeartbeat
	})
	ft.follows(9)
	ft.stop()
	waits := retryWaits(ft.logs.String())
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
	ft := newFollowTest(t)
	ft.run(1, func(fctx context.Context, from uint64, n int) error {
		if n == 1 {
			ft.f.apply(fctx, nil, from+2) // delivered; its writes are held
			ft.nc.Close()                 // then the bus goes away
		}
		return errors.New("nats: connection closed")
	})
	waits := until(func() ([]string, bool) {
		w := retryWaits(ft.logs.String())
		return w, len(w) >= 6
	})
	ft.stop()
	want := []string{"10ms", "20ms", "40ms", "80ms", "80ms", "80ms"}
	if len(waits) < 6 || !slices.Equal(waits[:6], want) {
		t.Errorf("waits %q, want %q (nothing delivered after the first follow)", waits, want)
	}
}

// A round that found the stream re-created (it rebased the projection and
// followed from the new stream's first event) and then failed goes on
// from there, not from the checkpoint it had before the rebase: once the
// new stream grew past that checkpoint, the old one was taken as current
// and the new stream's events below it were never projected.
func TestAFollowFailedAfterARebaseGoesOnFromTheNewStream(t *testing.T) {
	ft := newFollowTest(t)
	pub, err := jetstream.New(ft.ns.Connect(events.Planner))
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		for range n {
			if _, err := pub.Publish(ft.ctx, events.WorkflowLifecycle("w1"), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(2) // the re-created stream: 2 events, below the checkpoint of 4
	ft.run(5, func(fctx context.Context, from uint64, n int) error {
		if n == 1 {
			publish(4) // the new stream grows past the old checkpoint meanwhile
			return errNoHeartbeat
		}
		<-fctx.Done()
		return nil
	})
	got := ft.follows(2)
	ft.stop()
	if got[0] != 1 || got[1] != 1 {
		t.Errorf("followed from %v, want [1 1]: the rebased projection goes on from the new stream's first event", got)
	}
}

// behindOnce has the follower see the event stream as a server that has
// not caught up shows it (ending at 439) in its stream infos from the
// second to the n-th, and as it is (ending at 700) otherwise; the first
// follow hands the projection up to 693, then the bus goes away.
func (ft *followTest) behindOnce(n int) *int {
	created := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	infos := 0
	ft.f.streamFn = func(context.Context) (time.Time, uint64, uint64, error) {
		if infos++; infos >= 2 && infos <= n {
			return created, 1, 439, nil
		}
		return created, 1, 700, nil
	}
	ft.run(600, func(fctx context.Context, from uint64, n int) error {
		if n == 1 {
			ft.f.apply(fctx, nil, 693)
			return errNoHeartbeat
		}
		<-fctx.Done()
		return nil
	})
	return &infos
}

// A server that rejoins after a partition answers for a moment as the
// stream leader it was, with the stream as it was at the cut: its last
// sequence is below the projection's checkpoint. The stream was not
// re-created (its creation time is the one followed): the state-store
// tries again, and does not rebase its projection. Before, it took that
// answer for a re-created stream and rebased (seen on the cluster stack:
// "the event stream was re-created ... checkpoint 693, last_seq 439").
func TestAStreamInfoBehindTheProjectionIsNoRecreation(t *testing.T) {
	ft := newFollowTest(t)
	ft.behindOnce(2)
	got := ft.follows(2)
	ft.stop()
	if strings.Contains(ft.logs.String(), "re-created") {
		t.Errorf("the state-store took a server behind for a re-created stream: %s", ft.logs.String())
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
	ft := newFollowTest(t)
	ft.f.retry, ft.f.maxRetry, ft.f.behindFor = 5*time.Millisecond, 10*time.Millisecond, 200*time.Millisecond
	infos := ft.behindOnce(1 << 30) // the end is gone for good
	got := ft.follows(2)
	ft.stop()
	if got[1] != 1 || !strings.Contains(ft.logs.String(), "rebasing the projection") {
		t.Errorf("followed again from %d (stream infos %d), want 1 after a rebase", got[1], *infos)
	}
	if *infos < 3 {
		t.Errorf("rebased after %d stream infos: a stream behind is tried again first", *infos)
	}
}
