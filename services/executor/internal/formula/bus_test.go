package formula

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/services/executor/internal/slots"
	"github.com/gantry-dev/gantry/services/executor/internal/slots/slotstest"
)

// flakySlots is a slots store whose first creates fail, as the slots
// bucket of a NATS cluster does while its leader is being elected.
type flakySlots struct {
	*slotstest.Memory
	fail atomic.Int32
}

func (f *flakySlots) Create(ctx context.Context, key string, val []byte) (uint64, error) {
	if f.fail.Add(-1) >= 0 {
		return 0, errors.New("context deadline exceeded")
	}
	return f.Memory.Create(ctx, key, val)
}

// A slots bucket that does not answer for a while is gantry's trouble, not
// the node's: the attempt waits and takes its slot once the bucket answers.
// The node, allowed one attempt, runs once and succeeds; no attempt is
// reported failed. Before, the node failed ("nothing ran: cannot take a
// slot"), and with it the run.
func TestSlotsThatDoNotAnswerDoNotFailTheNode(t *testing.T) {
	t.Parallel()
	h := newHarness()
	store := &flakySlots{Memory: slotstest.NewMemory(time.Minute)}
	defer store.Close()
	store.fail.Store(3)
	h.x.Slots = &slots.Manager{Store: store, Executor: "executor/test"}
	d := dispatch(dag.OpCreate, 1, node("a", "run-a", 1))
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(h.stored(), "\n")
	if strings.Contains(got, "failed") || !strings.Contains(got, "a succeeded 1") || !strings.Contains(got, "f succeeded") {
		t.Fatalf("events:\n%s", got)
	}
	if r := h.record(dag.OpCreate, "a"); r.Status != dag.NodeSucceeded || r.GenAttempts != 1 {
		t.Fatalf("record %+v", r)
	}
}

// A slots bucket that does not answer within SlotRetryFor gives the
// dispatch back (an error: it is delivered again) without counting an
// attempt or failing, blocking or cancelling any node.
func TestSlotsThatNeverAnswerGiveTheDispatchBack(t *testing.T) {
	defer func(d time.Duration) { SlotRetryFor = d }(SlotRetryFor)
	SlotRetryFor = 300 * time.Millisecond
	h := newHarness()
	store := &flakySlots{Memory: slotstest.NewMemory(time.Minute)}
	defer store.Close()
	store.fail.Store(1 << 30)
	h.x.Slots = &slots.Manager{Store: store, Executor: "executor/test"}
	d := dispatch(dag.OpCreate, 1, node("a", "run-a", 1), node("b", "run-b", 1, "a"))
	err := h.x.Run(context.Background(), d)
	if !errors.Is(err, ErrBus) {
		t.Fatalf("Run: %v, want ErrBus", err)
	}
	got := strings.Join(h.stored(), "\n")
	for _, bad := range []string{"failed", "cancelled", "blocked", "succeeded"} {
		if strings.Contains(got, bad) {
			t.Fatalf("%s in events:\n%s", bad, got)
		}
	}
	if r := h.record(dag.OpCreate, "a"); r.GenAttempts != 0 {
		t.Fatalf("an attempt was counted: %+v", r)
	}
	// Delivered again once the bucket answers: the node runs, as its first attempt.
	store.fail.Store(0)
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if r := h.record(dag.OpCreate, "b"); r.Status != dag.NodeSucceeded || r.GenAttempts != 1 {
		t.Fatalf("record %+v", r)
	}
	if got := h.host.scripts(); strings.Join(got, " ") != "run-a run-b" {
		t.Fatalf("ran %q", got)
	}
}

// countingSlots counts the slots asked for.
type countingSlots struct {
	*slotstest.Memory
	creates atomic.Int32
}

func (c *countingSlots) Create(ctx context.Context, key string, val []byte) (uint64, error) {
	c.creates.Add(1)
	return c.Memory.Create(ctx, key, val)
}

// A redelivered dispatch (the bus lost for longer than its ack wait) whose
// nodes an earlier delivery saw succeed takes no slot for them and says
// nothing but that they are recorded: before, it asked for their slots
// first, announcing a wait (node.running) that was stored after the
// nodes' node.succeeded (11 nodes in a 150 s quorum loss on the cluster).
func TestRedeliveryTakesNoSlotForARecordedNode(t *testing.T) {
	t.Parallel()
	h := newHarness()
	store := &countingSlots{Memory: slotstest.NewMemory(time.Minute)}
	defer store.Close()
	h.x.Slots = &slots.Manager{Store: store, Executor: "executor/test"}
	d := dispatch(dag.OpCreate, 1, node("a", "run-a", 1), node("b", "run-b", 1, "a"))
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	first := store.creates.Load()
	before := len(h.stored())
	if err := h.x.run(context.Background(), d, time.Now(), true); err != nil {
		t.Fatal(err)
	}
	if got := store.creates.Load() - first; got != 0 {
		t.Errorf("the redelivery asked for %d slots for nodes recorded succeeded", got)
	}
	for _, e := range h.stored()[before:] {
		if strings.Contains(e, " running") {
			t.Errorf("the redelivery announced %q for a node recorded succeeded", e)
		}
	}
	if got := h.host.scripts(); len(got) != 2 {
		t.Errorf("ran %v", got)
	}
}
