package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// storageFull is what an observed write returns while JetStream cannot
// store.
func storageFull(stream string) error {
	return &eventbus.StorageError{Stream: stream, Cause: eventbus.StorageCauseNoAnswer, Err: context.DeadlineExceeded}
}

// A submission whose workflow record JetStream cannot store is refused
// with an error that names storage, and leaves no record behind: nothing
// runs later.
func TestSubmitRefusedNamingStorage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.workflows.Fail = func(op, key string) error {
		if op == "put" && !strings.Contains(key, ".") {
			return storageFull(events.BucketWorkflows)
		}
		return nil
	}
	_, err := h.e.Submit(context.Background(), []byte(chain), false, operator)
	if !eventbus.IsStorage(err) || !strings.Contains(err.Error(), "JetStream cannot store on gantry_workflows") {
		t.Fatalf("submit: %v, want an error naming storage", err)
	}
	if keys, _ := h.workflows.Keys(context.Background(), workflowKeys); len(keys) != 0 {
		t.Fatalf("a refused submission left records %v", keys)
	}
}

// A workflow whose record is stored is accepted, and the reply says so at
// once, even when its accepted event cannot be stored yet: the reply
// warns, naming storage, instead of waiting past the submitter's patience.
func TestSubmitAcceptedWhileItsEventWaits(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.out.Fail = func(eventbustest.Emitted) error { return storageFull(events.StreamEvents) }
	reply, err := h.e.Submit(context.Background(), []byte(chain), false, operator)
	if err != nil || reply.Status != "accepted" {
		t.Fatalf("submit: %+v, %v; want accepted", reply, err)
	}
	if len(reply.Warnings) != 1 || !strings.Contains(reply.Warnings[0], "JetStream cannot store on GANTRY_EVENTS") {
		t.Errorf("warnings %q, want one naming storage", reply.Warnings)
	}
	if _, _, err := h.workflows.Get(context.Background(), reply.WorkflowID); err != nil {
		t.Errorf("the accepted workflow's record: %v", err)
	}
}

// storedButUnanswered stores the workflow records it is given and then
// reports their creation as unanswered, as a write whose acknowledgement
// was lost.
type storedButUnanswered struct {
	*eventbustest.MemoryBucket[Record]
}

func (s storedButUnanswered) Put(ctx context.Context, key string, v Record, rev uint64) (uint64, error) {
	n, err := s.MemoryBucket.Put(ctx, key, v, rev)
	if err != nil || rev != 0 || strings.Contains(key, ".") {
		return n, err
	}
	return 0, storageFull(events.BucketWorkflows)
}

// A record write that had no answer but was stored is an acceptance: the
// reply says accepted, as the run will go.
func TestSubmitAcceptedWhenTheUnansweredRecordIsStored(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.e.Workflows = storedButUnanswered{h.workflows}
	reply, err := h.e.Submit(context.Background(), []byte(chain), false, operator)
	if err != nil || reply.Status != "accepted" {
		t.Fatalf("submit: %+v, %v; want accepted (the record is stored)", reply, err)
	}
	if err := h.e.Start(context.Background(), reply.WorkflowID); err != nil {
		t.Fatalf("start: %v", err)
	}
}

// workflowEvents are the statuses of the workflow events stored for id,
// in the order stored.
func workflowEvents(h *harness, id string) []string {
	var out []string
	for _, e := range h.out.Stored() {
		if ev, ok := e.Payload.(*events.WorkflowEvent); ok && ev.WorkflowID == id {
			out = append(out, string(ev.Status))
		}
	}
	return out
}

// An accepted event that could not be stored while the submission waited
// for it is stored before the run's first transition, once, whether the
// run begins, is paused or is cancelled, in this planner or (after a
// restart) in the next: the stream never holds a run without its accepted
// event.
func TestAcceptedEventStoredBeforeTheRunGoesOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		restart bool
		act     func(h *harness, id string) error
		want    []string
	}{
		{"begins", false, func(h *harness, id string) error { return h.e.Start(context.Background(), id) }, []string{"accepted", "running"}},
		{"begins after a restart", true, func(h *harness, id string) error {
			_, err := h.e.Resume(context.Background())
			return err
		}, []string{"accepted", "running"}},
		{"paused", false, func(h *harness, id string) error {
			_, err := h.e.Control(context.Background(), id, events.VerbPause, operator)
			return err
		}, []string{"accepted", "paused"}},
		{"cancelled", true, func(h *harness, id string) error {
			_, err := h.e.Control(context.Background(), id, events.VerbCancel, operator)
			return err
		}, []string{"accepted", "cancelled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.out.Fail = func(eventbustest.Emitted) error { return storageFull(events.StreamEvents) }
			reply, err := h.e.Submit(context.Background(), []byte(chain), false, operator)
			if err != nil || reply.Status != "accepted" || len(reply.Warnings) != 1 {
				t.Fatalf("submit: %+v, %v; want accepted with a warning", reply, err)
			}
			h.out.Fail = nil // JetStream stores again
			if tc.restart {
				h.fresh()
			}
			if err := tc.act(h, reply.WorkflowID); err != nil {
				t.Fatal(err)
			}
			if got := workflowEvents(h, reply.WorkflowID); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("workflow events stored %q, want %q", got, tc.want)
			}
		})
	}
}
