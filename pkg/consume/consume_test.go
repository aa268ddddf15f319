package consume_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func setup(t *testing.T, ackWait time.Duration) (jetstream.JetStream, jetstream.Consumer) {
	t.Helper()
	nc := natstest.Start(t).Connect(busauth.Admin)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"decky.>"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 10})
	if err != nil {
		t.Fatal(err)
	}
	return js, cons
}

func publishEvent(t *testing.T, js jetstream.JetStream, subject, node string) {
	t.Helper()
	ev := &events.NodeEvent{Ref: events.Ref{WorkflowID: "w", Workflow: "w", Formula: "f", Host: "h", Node: node, Operation: dag.OpCreate}, Status: dag.NodeRunning}
	env, _ := events.New("test", ev)
	b, _ := json.Marshal(env)
	if _, err := js.Publish(context.Background(), subject, b); err != nil {
		t.Fatal(err)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestAdapter(t *testing.T) {
	js, cons := setup(t, time.Second)
	var mu sync.Mutex
	deliveries := map[string]int{}
	handler := func(ctx context.Context, ev *consume.Event) error {
		var n events.NodeEvent
		if err := events.DecodeData(ev.Envelope, &n); err != nil {
			return err
		}
		mu.Lock()
		deliveries[n.Node]++
		d := deliveries[n.Node]
		mu.Unlock()
		switch n.Node {
		case "slow": // longer than AckWait: InProgress must keep it ours
			time.Sleep(2500 * time.Millisecond)
		case "poison":
			return consume.Poison(errors.New("cannot ever work"))
		case "panics":
			panic("boom")
		case "flaky": // fails twice, then works
			if d < 3 {
				return errors.New("transient")
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consume.Run(ctx, cons, handler, consume.Options{Name: "t", Concurrency: 4, AckWait: time.Second, Logger: quiet,
			NakDelay: func(uint64) time.Duration { return 50 * time.Millisecond }})
	}()
	for _, n := range []string{"slow", "poison", "panics", "flaky", "ok"} {
		publishEvent(t, js, "decky.h.lifecycle", n)
	}
	js.Publish(context.Background(), "decky.h.lifecycle", []byte("not an event"))
	time.Sleep(4 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"slow": 1, "poison": 1, "panics": 1, "flaky": 3, "ok": 1}
	mu.Lock()
	defer mu.Unlock()
	for k, v := range want {
		if deliveries[k] != v {
			t.Errorf("%s handled %d times, want %d", k, deliveries[k], v)
		}
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("messages left: %d ack-pending, %d pending", info.NumAckPending, info.NumPending)
	}
}

// Cancelling the context (SIGTERM) stops fetching but lets the handler in
// flight finish, and its message is acked, not redelivered.
func TestDrainFinishesInFlight(t *testing.T) {
	js, cons := setup(t, 5*time.Second)
	var started, finished atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	handler := func(hctx context.Context, ev *consume.Event) error {
		started.Add(1)
		cancel() // the signal arrives while work is in flight
		time.Sleep(500 * time.Millisecond)
		if hctx.Err() != nil {
			return hctx.Err()
		}
		finished.Add(1)
		return nil
	}
	publishEvent(t, js, "decky.h.lifecycle", "a")
	if err := consume.Run(ctx, cons, handler, consume.Options{Name: "t", Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if started.Load() != 1 || finished.Load() != 1 {
		t.Fatalf("started %d finished %d", started.Load(), finished.Load())
	}
	info, _ := cons.Info(context.Background())
	if info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Fatalf("after drain: %d ack-pending, %d redelivered", info.NumAckPending, info.NumRedelivered)
	}
}

// RunBatch hands over, in stream order, every message already pulled; each
// result settles its own message; a panic is pinned on its event by
// handling the batch's events again one by one; a batch-wide failure
// redelivers every event of the batch.
func TestRunBatch(t *testing.T) {
	js, cons := setup(t, time.Second)
	var mu sync.Mutex
	var sizes []int
	var order []string
	deliveries := map[string]int{}
	failBatchOnce := true
	handler := func(ctx context.Context, evs []*consume.Event) []error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(evs))
		errs := make([]error, len(evs))
		for i, ev := range evs {
			var n events.NodeEvent
			if err := events.DecodeData(ev.Envelope, &n); err != nil {
				errs[i] = err
				continue
			}
			deliveries[n.Node]++
			order = append(order, n.Node)
			switch {
			case n.Node == "poison":
				errs[i] = consume.Poison(errors.New("cannot ever work"))
			case n.Node == "panics":
				panic("boom")
			case n.Node == "n-7" && failBatchOnce && len(evs) > 1:
				// a failure of the batch's final write: every event's result
				failBatchOnce = false
				for k := range errs {
					errs[k] = errors.New("flush failed")
				}
				return errs
			}
		}
		return errs
	}
	// Published before the consumer starts, so the first pull brings many.
	var names []string
	for i := range 20 {
		names = append(names, "n-"+strconv.Itoa(i))
	}
	names = append(names, "poison", "panics", "last")
	for _, n := range names {
		publishEvent(t, js, "decky.h.lifecycle", n)
	}
	js.Publish(context.Background(), "decky.h.lifecycle", []byte("not an event"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// A linger: the first batch waits for what the first pull
		// brought, rather than racing the goroutine that hands it over
		// (under load the first batch held one event).
		done <- consume.RunBatch(ctx, cons, handler, consume.Options{Name: "t", Prefetch: 64, AckWait: time.Second, Logger: quiet, Linger: 300 * time.Millisecond,
			NakDelay: func(uint64) time.Duration { return 50 * time.Millisecond }})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		info, err := cons.Info(context.Background())
		if err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Stream >= uint64(len(names)+1) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) == 0 || sizes[0] < 2 {
		t.Fatalf("batch sizes %v: the first pull should hand over several events at once", sizes)
	}
	// The first batch is in stream order.
	for i := 0; i < 5; i++ {
		if order[i] != names[i] {
			t.Fatalf("order %v, want %v first", order[:5], names[:5])
		}
	}
	for _, n := range names {
		want := 1
		switch n {
		case "n-7":
			want = 2 // its batch failed once: redelivered
		case "panics":
			want = 2 // once in its batch, once alone (then terminated)
		}
		if deliveries[n] < want {
			t.Errorf("%s handled %d times, want at least %d", n, deliveries[n], want)
		}
	}
	if deliveries["panics"] > 3 || deliveries["poison"] > 2 {
		t.Errorf("poison handled %d, panics %d times: they must be terminated, not redelivered", deliveries["poison"], deliveries["panics"])
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("messages left: %d ack-pending, %d pending", info.NumAckPending, info.NumPending)
	}
}

// TestFollow: Follow starts at the sequence asked for, hands over every
// event in stream order with the sequence each batch ends at (something
// that does not parse is left out of the events but counted), gathers
// events arriving within the linger into one batch, and returns when
// cancelled.
func TestFollow(t *testing.T) {
	js, _ := setup(t, time.Second)
	for i := 1; i <= 5; i++ {
		publishEvent(t, js, "decky.h.lifecycle", "n"+strconv.Itoa(i))
	}
	type batch struct {
		nodes []string
		last  uint64
	}
	got := make(chan batch, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consume.Follow(ctx, js, "T", 3, func(_ context.Context, evs []*consume.Event, last uint64) {
			b := batch{last: last}
			for _, ev := range evs {
				var n events.NodeEvent
				if err := events.DecodeData(ev.Envelope, &n); err != nil {
					t.Error(err)
				}
				b.nodes = append(b.nodes, n.Node)
			}
			got <- b
		}, consume.Options{Name: "follow", Prefetch: 64, Linger: 300 * time.Millisecond, Logger: quiet})
	}()
	var nodes []string
	var batches int
	var last uint64
	collect := func(until uint64) {
		t.Helper()
		for last < until {
			select {
			case b := <-got:
				batches++
				nodes = append(nodes, b.nodes...)
				if b.last <= last {
					t.Errorf("batch ends at %d after one ending at %d", b.last, last)
				}
				last = b.last
			case <-time.After(10 * time.Second):
				t.Fatalf("stuck at sequence %d of %d", last, until)
			}
		}
	}
	collect(5)
	if want := "n3 n4 n5"; strings.Join(nodes, " ") != want || batches != 1 {
		t.Errorf("from sequence 3: %d batches %v, want one batch %s", batches, nodes, want)
	}
	// Trickling in, 5 ms apart: the linger makes them one or two batches.
	nodes, batches = nil, 0
	if _, err := js.Publish(context.Background(), "decky.h.lifecycle", []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	for i := 6; i <= 15; i++ {
		publishEvent(t, js, "decky.h.lifecycle", "n"+strconv.Itoa(i))
		time.Sleep(5 * time.Millisecond)
	}
	collect(16)
	if want := "n6 n7 n8 n9 n10 n11 n12 n13 n14 n15"; strings.Join(nodes, " ") != want {
		t.Errorf("got %v, want %s", nodes, want)
	}
	if batches > 2 {
		t.Errorf("%d batches for 11 messages within the linger", batches)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return when cancelled")
	}
}

// A consumer deleted under Run is re-created through Options.Repair, and
// Run goes on with the new one: nothing published after is missed.
func TestRunRepairsDeletedConsumer(t *testing.T) {
	js, cons := setup(t, time.Second)
	cfg := jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 10}
	var repairs atomic.Int32
	var mu sync.Mutex
	seen := map[string]bool{}
	handler := func(ctx context.Context, ev *consume.Event) error {
		var n events.NodeEvent
		if err := events.DecodeData(ev.Envelope, &n); err != nil {
			return err
		}
		mu.Lock()
		seen[n.Node] = true
		mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consume.Run(ctx, cons, handler, consume.Options{Name: "t", AckWait: time.Second, Logger: quiet,
			Repair: func(ctx context.Context) (jetstream.Consumer, error) {
				repairs.Add(1)
				return js.CreateOrUpdateConsumer(ctx, "T", cfg)
			}})
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (seen %d, repairs %d)", what, count(), repairs.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	publishEvent(t, js, "decky.h.lifecycle", "n1")
	waitUntil("the first event", func() bool { return count() == 1 })
	if err := js.DeleteConsumer(context.Background(), "T", "c"); err != nil {
		t.Fatal(err)
	}
	waitUntil("a repair", func() bool { return repairs.Load() > 0 })
	for _, n := range []string{"n2", "n3", "n4"} {
		publishEvent(t, js, "decky.h.lifecycle", n)
	}
	waitUntil("every event after the repair", func() bool { return count() == 4 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunSharesRedeliveryInFlight: a durable consumer deleted and
// re-created while a handler runs delivers that message again; the new
// delivery waits for the handler already running and is acked with its
// result, instead of doing the work a second time alongside it.
func TestRunSharesRedeliveryInFlight(t *testing.T) {
	js, cons := setup(t, 5*time.Second)
	cfg := jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: 10}
	var calls atomic.Int32
	release := make(chan struct{})
	handler := func(ctx context.Context, ev *consume.Event) error {
		calls.Add(1)
		<-release
		return nil
	}
	var repaired atomic.Pointer[jetstream.Consumer]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consume.Run(ctx, cons, handler, consume.Options{Name: "t", Concurrency: 4, AckWait: 5 * time.Second, Logger: quiet,
			Repair: func(ctx context.Context) (jetstream.Consumer, error) {
				c, err := js.CreateOrUpdateConsumer(ctx, "T", cfg)
				if err == nil {
					repaired.Store(&c)
				}
				return c, err
			}})
	}()
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (handler called %d times)", what, calls.Load())
			}
		}
	}
	info := func() *jetstream.ConsumerInfo {
		c := repaired.Load()
		if c == nil {
			return nil
		}
		i, err := (*c).Info(context.Background())
		if err != nil {
			return nil
		}
		return i
	}
	publishEvent(t, js, "decky.h.lifecycle", "slow")
	waitUntil("the handler to start", func() bool { return calls.Load() == 1 })
	if err := js.DeleteConsumer(context.Background(), "T", "c"); err != nil {
		t.Fatal(err)
	}
	waitUntil("the re-created consumer to deliver the message again", func() bool {
		i := info()
		return i != nil && i.NumAckPending == 1
	})
	close(release)
	waitUntil("the new delivery acked", func() bool {
		i := info()
		return i != nil && i.NumAckPending == 0 && i.NumPending == 0
	})
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// An event that did not come the way its type comes (here a node's
// transition on a health subject, and one about another host than its
// subject's) is never handled: it is terminated and counted.
func TestMisroutedEventsRefused(t *testing.T) {
	js, cons := setup(t, time.Second)
	var mu sync.Mutex
	var handled []string
	handler := func(ctx context.Context, ev *consume.Event) error {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, ev.Subject)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	refused := consume.RefusedTotal.WithLabelValues("refusing", string(events.NodeType(dag.NodeRunning)))
	before := testutil.ToFloat64(refused) // the counter is the process's: other runs of the test count too
	go func() { done <- consume.Run(ctx, cons, handler, consume.Options{Name: "refusing", Logger: quiet}) }()
	publishEvent(t, js, "decky.h.health", "forged")
	publishEvent(t, js, "decky.other.lifecycle", "elsewhere")
	publishEvent(t, js, "decky.h.lifecycle", "real")
	// Until all three were delivered and settled: right after a publish
	// the consumer may not count it as pending yet, so "nothing pending"
	// alone can come before any delivery.
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		settled := info.Delivered.Stream >= 3 && info.NumAckPending == 0 && info.NumPending == 0
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(handled, []string{"decky.h.lifecycle"}) {
		t.Errorf("handled %v, want only the event on its own host's lifecycle", handled)
	}
	if got := testutil.ToFloat64(refused) - before; got != 2 {
		t.Errorf("refused counter went up %v, want 2", got)
	}
}

// A follow whose consumer cannot be re-created (here: its stream was
// deleted) ends at once, so its caller can say so and follow again; it
// does not retry unseen inside the client.
func TestFollowEndsWhenItsConsumerCannotBeRecreated(t *testing.T) {
	js, _ := setup(t, time.Second)
	publishEvent(t, js, "decky.h.lifecycle", "n1")
	got := make(chan uint64, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- consume.Follow(ctx, js, "T", 1, func(_ context.Context, _ []*consume.Event, last uint64) { got <- last },
			consume.Options{Name: "follow", Prefetch: 8, Logger: quiet})
	}()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing delivered within 10s")
	}
	if err := js.DeleteStream(context.Background(), "T"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the follow ended with nil while its context was live; want an error")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the follow still waits 20s after its stream was deleted")
	}
}

// Skip: the types the handler does nothing with are acknowledged unread
// (one whose data does not decode too: it is never read), the others come
// to the handler as ever, and a message whose type cannot be peeked is
// read in full (here refused as not an event).
func TestRunBatchSkipsTypesUnread(t *testing.T) {
	js, cons := setup(t, time.Second)
	ctx := context.Background()
	formula := &events.FormulaEvent{Ref: events.Ref{WorkflowID: "w", Workflow: "w", Formula: "f", Host: "h", Operation: dag.OpCreate}, Status: dag.FormulaSucceeded}
	env, _ := events.New("test", formula)
	fb, _ := json.Marshal(env)
	publishEvent(t, js, "decky.h.lifecycle", "a")
	// a node event's head with data that is no node event: skipped unread
	node, _ := events.New("test", &events.NodeEvent{Ref: events.Ref{WorkflowID: "w", Workflow: "w", Formula: "f", Host: "h", Node: "b", Operation: dag.OpCreate}, Status: dag.NodeRunning})
	node.Data = json.RawMessage(`{"status": 7}`)
	nb, _ := json.Marshal(node)
	for _, b := range [][]byte{nb, fb, []byte("not an event")} {
		if _, err := js.Publish(ctx, "decky.h.lifecycle", b); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var got []events.Type
	handler := func(ctx context.Context, evs []*consume.Event) []error {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			got = append(got, ev.Type)
		}
		return make([]error, len(evs))
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- consume.RunBatch(cctx, cons, handler, consume.Options{Name: "t", AckWait: time.Second, Logger: quiet,
			Skip: func(t events.Type) bool { return t.Family() == events.FamilyNode }})
	}()
	deadline := time.Now().Add(5 * time.Second)
	var info *jetstream.ConsumerInfo
	for time.Now().Before(deadline) {
		info, _ = cons.Info(ctx)
		if info != nil && info.AckFloor.Stream == 4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if info == nil || info.AckFloor.Stream != 4 || info.NumAckPending != 0 {
		t.Fatalf("consumer %+v: want all 4 settled", info)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []events.Type{formula.EventType()}) {
		t.Fatalf("the handler got %v, want only the formula event", got)
	}
}
