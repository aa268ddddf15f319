package project_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
)

// failingStore fails its next fails writes of documents.
type failingStore struct {
	*project.MemStore
	fails  int
	writes int
}

func (s *failingStore) PutAll(ctx context.Context, ws []project.Write) {
	s.writes += len(ws)
	if s.fails > 0 {
		s.fails--
		for i := range ws {
			ws[i].Err = errors.New("write refused")
		}
		return
	}
	s.MemStore.PutAll(ctx, ws)
}

// holdFeed is a feed whose projector holds its writes for an hour: they
// are made when a read awaits them.
func holdFeed(t *testing.T) (*feed, *failingStore) {
	mem := project.NewMemStore()
	fs := &failingStore{MemStore: mem}
	p := &project.Projector{Store: fs, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Checkpoint: project.CheckpointKey, Hold: time.Hour}
	return &feed{t: t, mem: mem, p: p, at: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}, fs
}

// await has every event so far written, as a read does.
func (f *feed) await() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.p.Await(ctx, f.seq); err != nil {
		f.t.Fatal(err)
	}
}

// With Hold, the batches' writes wait, and each document that several
// batches changed is written once, when a read awaits them; a write that
// fails has every held event applied again over fresh reads, so none of
// their effects is lost.
func TestHeldWritesAreJoined(t *testing.T) {
	f, fs := holdFeed(t)
	r := f.run("wf-1", 1)
	r.workflow("w-acc", dag.WorkflowAccepted, "")
	r.workflow("w-run", dag.WorkflowRunning, "")
	r.formula("f-ready", dag.FormulaReady)
	r.formula("f-run", dag.FormulaRunning)
	r.node("a-run-1", "a", dag.NodeRunning, 1, false)
	r.node("a-ok-1", "a", dag.NodeSucceeded, 1, false)
	r.formula("f-ok", dag.FormulaSucceeded)
	if fs.writes != 0 || f.p.Applied() != 0 {
		t.Fatalf("%d documents written, applied %d, before anything awaited them", fs.writes, f.p.Applied())
	}
	f.await()
	// the workflow, the formula, the node, the node on its host: once each
	if fs.writes != 4 {
		t.Errorf("7 events in 7 batches made %d writes, want 4 (one per document)", fs.writes)
	}
	if got := string(f.mem.Vals[project.CheckpointKey]); got != "7" {
		t.Errorf("checkpoint %q, want 7", got)
	}
	var fd events.FormulaDoc
	f.decode(project.FormulaDocKey("wf-1", "f"), &fd)
	if fd.Status != dag.FormulaSucceeded {
		t.Errorf("formula %s, want succeeded", fd.Status)
	}

	// The next write fails: the held events are applied again and written.
	fs.fails = 1
	r.node("b-run-1", "b", dag.NodeRunning, 1, false)
	r.node("b-ok-1", "b", dag.NodeSucceeded, 1, false)
	r.workflow("w-ok", dag.WorkflowSucceeded, "")
	f.await()
	var nd events.NodeDoc
	f.decode(project.NodeDocKey("wf-1", "f", "b"), &nd)
	var wd events.WorkflowDoc
	f.decode(project.WorkflowDocKey("wf-1"), &wd)
	if nd.Status != dag.NodeSucceeded || wd.Status != dag.WorkflowSucceeded {
		t.Errorf("after a failed write: node b %s, workflow %s; want both succeeded", nd.Status, wd.Status)
	}
	if got := string(f.mem.Vals[project.CheckpointKey]); got != "10" {
		t.Errorf("checkpoint %q, want 10", got)
	}
}
