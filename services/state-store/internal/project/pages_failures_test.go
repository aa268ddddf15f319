package project_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"

	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// ackLost stores every write but, while lose is set, answers a page's
// write with an error: a JetStream ack that timed out (PublishTimeout,
// a leader change, a slow disk) although the server stored the message.
type ackLost struct {
	*project.MemStore
	lose     bool
	loseOnce bool
}

func (s *ackLost) PutAll(ctx context.Context, ws []project.Write) {
	s.MemStore.PutAll(ctx, ws)
	for i := range ws {
		if (s.lose || s.loseOnce) && strings.HasPrefix(ws[i].Key, "wf-page.") {
			ws[i].NewRev, ws[i].Err = 0, context.DeadlineExceeded
			s.loseOnce = false
		}
	}
}

// A page naming a large document is stored but its answer is lost (a
// JetStream ack that timed out): the projector, told the write failed,
// reads again, applies again and goes on.
func TestPagesAProjectorGoesOnAfterALostPageAnswer(t *testing.T) {
	raw := &ackLost{MemStore: project.NewMemStore()}
	p := &project.Projector{Store: &project.Pages{Raw: raw}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	var seq uint64
	var batch []*consume.Event
	add := func(pl events.Payload) {
		seq++
		env, err := events.NewAt(fmt.Sprintf("ev-%d", seq), "test/1", at, pl)
		if err != nil {
			t.Fatal(err)
		}
		subject := events.HostLifecycle("h")
		if w, ok := pl.(*events.WorkflowEvent); ok {
			subject = events.WorkflowLifecycle(w.WorkflowID)
		}
		batch = append(batch, &consume.Event{Envelope: env, Subject: subject, Stream: seq})
	}
	ref := events.Ref{WorkflowID: "w", Workflow: "web", Operation: dag.OpCreate, Generation: 1, Host: "h"}
	add(&events.WorkflowEvent{Ref: ref, Status: dag.WorkflowAccepted, Formulas: map[events.FormulaState]int{dag.FormulaPending: 1}, TotalNodes: 1})
	add(&events.WorkflowEvent{Ref: ref, Status: dag.WorkflowRunning})
	r := ref
	r.Formula = "f"
	add(&events.FormulaEvent{Ref: r, Status: dag.FormulaReady})
	add(&events.FormulaEvent{Ref: r, Status: dag.FormulaRunning})
	r.Node = "n"
	code := 1
	add(&events.NodeEvent{Ref: r, Status: dag.NodeRunning, Run: events.Run{Attempt: 1, StartedAt: &at}})
	add(&events.NodeEvent{Ref: r, Status: dag.NodeFailed, Run: events.Run{Attempt: 1, StartedAt: &at, EndedAt: &at, ExitCode: &code, Error: strings.Repeat("no space left on device; ", 300)}})
	p.Apply(context.Background(), batch, seq)
	batch = nil
	if p.Applied() != seq || len(ownValues(raw.MemStore, "w")) == 0 {
		t.Fatalf("setup: applied %d of %d, own values %v", p.Applied(), seq, ownValues(raw.MemStore, "w"))
	}
	// The formula fails with the node's error: its document, now large,
	// becomes a value of its own.
	r.Node = ""
	add(&events.FormulaEvent{Ref: r, Status: dag.FormulaFailed, Run: events.Run{Error: strings.Repeat("no space left on device; ", 300)}})
	raw.loseOnce = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.Apply(ctx, batch, seq)
	if p.Applied() != seq {
		_, _, err := (&project.Pages{Raw: raw}).Get(context.Background(), project.FormulaDocKey("w", "f"))
		t.Errorf("one lost answer of a page: the projection is stuck at %d of %d after 2s of retries (%v)", p.Applied(), seq, err)
	}
}

// A page write answered failed but stored: what it names is still there
// for Get and Values (the values a failed write names are left for the
// prune, as it may have been stored).
func TestPagesAPageStoredButAnsweredFailed(t *testing.T) {
	raw := &ackLost{MemStore: project.NewMemStore()}
	s := &project.Pages{Raw: raw}
	ctx := context.Background()
	x := project.NodeDocKey("w", "f", "n")
	putAll(t, s, []project.Write{summary("w", 1), {Key: x, Val: []byte(`"small"`)}})
	raw.lose = true
	ws := []project.Write{{Key: x, Val: largeDoc, Rev: 1}}
	s.PutAll(ctx, ws)
	raw.lose = false
	t.Logf("write answered: %v; page now %s; own values %v", ws[0].Err, raw.Vals["wf-page.w.0"], ownValues(raw.MemStore, "w"))
	// The projector, told the write failed, reads again to apply again.
	for i, r := range []*project.Pages{s, {Raw: raw}} {
		if v, rev, err := r.Get(ctx, x); err != nil || len(v) == 0 {
			t.Errorf("reader %d: %s at %d: %d bytes, %v", i, x, rev, len(v), err)
		}
	}
	if _, err := s.Values(ctx, ">"); err != nil {
		t.Errorf("Values(>) (rebuild's first read): %v", err)
	}
}

// Values reads the pages, then another replica writes a large document
// again (a new name, the old one removed) before Values reads the values
// of their own: the document is read from its page read again, not from
// this replica's older cached copy.
func TestPagesValuesWhileAnotherReplicaWrites(t *testing.T) {
	raw := &hooked{MemStore: project.NewMemStore()}
	a := &project.Pages{Raw: raw.MemStore} // the replica ahead
	b := &project.Pages{Raw: raw}          // this replica (answers state.*)
	ctx := context.Background()
	x := project.NodeDocKey("w", "f", "n")
	putAll(t, a, []project.Write{summary("w", 1), {Key: project.NodeDocKey("w", "f", "o"), Val: []byte(`1`)}})
	if v, _, _ := b.Get(ctx, x); v != nil { // b caches the page: x absent
		t.Fatal(v)
	}
	putAll(t, a, []project.Write{{Key: x, Val: largeDoc}}) // x: own value K1
	raw.after = func() {                                   // after Values read the pages: K1 -> K2
		putAll(t, a, []project.Write{{Key: x, Val: append([]byte(`"v2`), largeDoc[3:]...), Rev: 1}})
	}
	vals, err := b.Values(ctx, "wf.w.>")
	if _, ok := vals[x]; !ok || err != nil {
		t.Errorf("Values while another replica writes %s: %d values, %v; %s missing", x, len(vals), err, x)
	}
}

// Each write of a large document removes the value it replaces without
// a delete marker: the bucket keeps the summary, the page and one value.
func TestPagesReplacedValuesLeaveNothing(t *testing.T) {
	ctx := context.Background()
	kv := kvStore(t, ctx)
	s := &project.Pages{Raw: kv}
	x := project.NodeDocKey("w", "f", "n")
	putAll(t, s, []project.Write{summary("w", 1), {Key: x, Val: largeDoc}})
	rev := uint64(1)
	for i := range 200 {
		ws := []project.Write{{Key: x, Val: append([]byte(fmt.Sprintf(`"%d`, i)), largeDoc[1:]...), Rev: rev}}
		putAll(t, s, ws)
		rev = ws[0].NewRev
	}
	st, err := kv.KV.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Values() > 10 {
		t.Errorf("one document written 201 times: the bucket holds %d messages (summary, page, one value)", st.Values())
	}
}
