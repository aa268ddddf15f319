package consume_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// storageFull is what an observed write returns while JetStream cannot
// store.
var storageFull = &eventbus.StorageError{Stream: events.BucketNodes, Cause: eventbus.StorageCauseNoAnswer, Err: context.DeadlineExceeded}

// fastStorageRetry makes the in-place retries quick for a test.
func fastStorageRetry(t *testing.T) {
	old, oldMax := consume.StorageRetry, consume.StorageRetryMax
	consume.StorageRetry, consume.StorageRetryMax = 20*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { consume.StorageRetry, consume.StorageRetryMax = old, oldMax })
}

// strictConsumer is a durable consumer that gives a message up after two
// deliveries.
func strictConsumer(t *testing.T) (jetstream.JetStream, jetstream.Consumer) {
	t.Helper()
	js, _ := setup(t, time.Second)
	cons, err := js.CreateConsumer(context.Background(), "T", jetstream.ConsumerConfig{Durable: "strict", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 2})
	if err != nil {
		t.Fatal(err)
	}
	return js, cons
}

// A handler whose writes JetStream cannot store (a full disk) keeps its
// message and is run again in place until they are stored: the message's
// deliveries, which MaxDeliver bounds, are not used up, so it is not given
// up however long the disk stays full.
func TestStorageTroubleUsesNoDeliveries(t *testing.T) {
	fastStorageRetry(t)
	js, cons := strictConsumer(t)
	var mu sync.Mutex
	var delivered []uint64
	handler := func(ctx context.Context, ev *consume.Event) error {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, ev.Delivered)
		if len(delivered) <= 5 {
			return storageFull
		}
		return nil
	}
	publishEvent(t, js, "decky.h.lifecycle", "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consume.Run(ctx, cons, handler, consume.Options{Name: "t", AckWait: time.Second, Logger: quiet,
			NakDelay: func(uint64) time.Duration { return 20 * time.Millisecond }})
	}()
	waitSettled(t, cons)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) != 6 || delivered[5] != 1 {
		t.Fatalf("handled %d times with deliveries %v; want 6 times, all of the first delivery", len(delivered), delivered)
	}
}

// The same for a batch consumer: only the events whose handling could not
// store are handled again, in place.
func TestStorageTroubleUsesNoDeliveriesInABatch(t *testing.T) {
	fastStorageRetry(t)
	js, cons := strictConsumer(t)
	var mu sync.Mutex
	handled := map[string][]uint64{}
	handler := func(ctx context.Context, evs []*consume.Event) []error {
		mu.Lock()
		defer mu.Unlock()
		errs := make([]error, len(evs))
		for i, ev := range evs {
			var n events.NodeEvent
			_ = events.DecodeData(ev.Envelope, &n)
			handled[n.Node] = append(handled[n.Node], ev.Delivered)
			if n.Node == "full" && len(handled[n.Node]) <= 4 {
				errs[i] = storageFull
			}
		}
		return errs
	}
	publishEvent(t, js, "decky.h.lifecycle", "full")
	publishEvent(t, js, "decky.h.lifecycle", "fine")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consume.RunBatch(ctx, cons, handler, consume.Options{Name: "t", AckWait: time.Second, Logger: quiet,
			NakDelay: func(uint64) time.Duration { return 20 * time.Millisecond }})
	}()
	waitSettled(t, cons)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := handled["full"]; len(got) != 5 || got[4] != 1 {
		t.Errorf("the event that could not store was handled with deliveries %v; want 5 times, all of the first delivery", got)
	}
	if got := handled["fine"]; len(got) != 1 {
		t.Errorf("the event that stored was handled %d times, want once", len(got))
	}
}

// Stopping ends the retries at once: a drain does not wait for storage.
func TestStopEndsStorageRetries(t *testing.T) {
	js, cons := strictConsumer(t)
	failing := make(chan struct{}, 1)
	handler := func(ctx context.Context, ev *consume.Event) error {
		select {
		case failing <- struct{}{}:
		default:
		}
		return storageFull
	}
	publishEvent(t, js, "decky.h.lifecycle", "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consume.Run(ctx, cons, handler, consume.Options{Name: "t", AckWait: time.Second, Logger: quiet})
	}()
	<-failing
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still waiting for storage 5s after it was stopped")
	}
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("stopping took %s", took)
	}
}

// Stopping is what a handler's context says once its consumer stops.
func TestHandlersSeeStopping(t *testing.T) {
	js, cons := setup(t, time.Second)
	seen := make(chan bool, 1)
	ctx, cancel := context.WithCancel(context.Background())
	handler := func(hctx context.Context, ev *consume.Event) error {
		before := eventbus.Stopping(hctx)
		cancel()
		if before || !eventbus.Stopping(hctx) || hctx.Err() != nil {
			seen <- false
			return errors.New("stopping not seen")
		}
		seen <- true
		return nil
	}
	publishEvent(t, js, "decky.h.lifecycle", "a")
	if err := consume.Run(ctx, cons, handler, consume.Options{Name: "t", Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if !<-seen {
		t.Error("the handler's context did not say the consumer was stopping (or was cancelled)")
	}
}

// waitSettled waits until the consumer has nothing pending or unacked.
func waitSettled(t *testing.T, cons jetstream.Consumer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(context.Background())
		if err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Stream > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("messages not settled within 10s: %+v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
