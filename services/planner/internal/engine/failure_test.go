package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

var jetstreamStreamNotFound = jetstream.ErrStreamNotFound

const rollback = `
name: rb
hosts: {h1: {transport: local}}
on_failure: rollback
formulas:
  - id: a
    server: h1
    nodes:
      - {name: x, run: "true", delete: "rm x"}
      - {name: keep, run: "true"}
  - id: b
    server: h1
    depends_on: [{formula: a, condition: completed}]
    nodes: [{name: y, run: "false", delete: "rm y"}]
`

func wantStored(t *testing.T, h *harness, want ...string) {
	t.Helper()
	if got := h.stored(); !slices.Equal(got, want) {
		t.Fatalf("stored\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRollbackDeletesWhatSucceeded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	must(t, h.submit(rollback))
	h.stored()
	h.recordNode(dag.OpCreate, "a", "x", dag.NodeSucceeded)
	h.recordNode(dag.OpCreate, "a", "keep", dag.NodeSucceeded)
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	h.stored()
	h.recordNode(dag.OpCreate, "b", "y", dag.NodeFailed)
	must(t, h.formula("b", 1, dag.FormulaFailed))
	wantStored(t, h, "workflow running: rolling back after formula b failed: deleting 1 formulas (1 succeeded nodes have no delete and stay)",
		"a ready", "dispatch a delete g2")
	h.recordNode(dag.OpDelete, "a", "x", dag.NodeSucceeded)
	must(t, h.formula("a", 2, dag.FormulaSucceeded))
	wantStored(t, h, "workflow failed: formula b failed; rolled back: 1 of 1 succeeded nodes deleted")
	if h.status() != dag.WorkflowFailed {
		t.Fatalf("status %s", h.status())
	}
}

func TestRollbackWithNothingToUndo(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	must(t, h.submit(rollback))
	h.stored()
	must(t, h.formula("a", 1, dag.FormulaFailed))
	wantStored(t, h, "b/y blocked", "b blocked (a)", "workflow failed: formula a failed; nothing to roll back")
}

// A node record that cannot be read is not a node that did not succeed:
// the event is redelivered, and nothing is decided on a guess.
func TestRollbackReadErrorIsNotNone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	must(t, h.submit(rollback))
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	h.stored()
	down := errors.New("bucket unavailable")
	h.nodes.Fail = func(op, key string) error { return down }
	if err := h.formula("b", 1, dag.FormulaFailed); !errors.Is(err, down) {
		t.Fatalf("err %v, want the read error, for redelivery", err)
	}
	wantStored(t, h) // nothing decided
	if h.status() != dag.WorkflowRunning || h.snapshot() != "sr" {
		t.Fatalf("recorded %s %s, want running sr", h.status(), h.snapshot())
	}
	h.nodes.Fail = nil
	h.recordNode(dag.OpCreate, "a", "x", dag.NodeSucceeded)
	must(t, h.formula("b", 1, dag.FormulaFailed))
	wantStored(t, h, "workflow running: rolling back after formula b failed: deleting 1 formulas", "a ready", "dispatch a delete g2")
}

func TestSubmitFailsWhenThePastRunsCannotBeRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	must(t, h.submit(chain))
	first := h.id
	for name, fail := range map[string]func(){
		"node records": func() { h.nodes.Fail = func(op, key string) error { return errors.New("timeout") } },
		"runs listed":  func() { h.workflows.Fail = func(op, key string) error { return failOn(op, "entries", "timeout") } },
		"run record": func() {
			h.workflows.Fail = func(op, key string) error { return failOn(op+key, "get"+first, "timeout") }
		},
	} {
		fail()
		if err := h.submit(chain); err == nil || !strings.Contains(err.Error(), "timeout") {
			t.Fatalf("%s: err %v", name, err)
		}
		h.nodes.Fail, h.workflows.Fail = nil, nil
		if keys, _ := h.workflows.Keys(context.Background(), workflowKeys); len(keys) != 1 {
			t.Fatalf("%s: a refused submission wrote %v", name, keys)
		}
	}
	must(t, h.submit(chain))
}

func failOn(got, want, msg string) error {
	if got == want {
		return errors.New(msg)
	}
	return nil
}

// A batch whose events cannot all be recorded is redelivered whole, and
// the redelivery decides the same, under the same message ids.
func TestFailedSaveRedeliversTheBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	must(t, h.submit(chain))
	h.stored()
	down := errors.New("kv down")
	h.runs.Fail = func(op, key string) error {
		if op == "put" {
			return down
		}
		return nil
	}
	if err := h.formula("a", 1, dag.FormulaSucceeded); !errors.Is(err, down) {
		t.Fatalf("err %v", err)
	}
	wantStored(t, h, "b ready", "dispatch b create g1") // published before the failed save
	if h.snapshot() != "rp" {
		t.Fatalf("snapshot %s, want rp (the save failed)", h.snapshot())
	}
	h.runs.Fail = nil
	must(t, h.formula("a", 1, dag.FormulaSucceeded)) // the redelivery
	wantStored(t, h)                                 // the same decisions: duplicates dropped
	if h.snapshot() != "sr" {
		t.Fatalf("snapshot %s, want sr", h.snapshot())
	}
}

// A poison event in a batch is terminated alone; the others are applied.
func TestPoisonEventInABatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	must(t, h.submit(chain))
	h.stored()
	bad := h.event(&events.FormulaEvent{Ref: h.ref("a", 1), Status: dag.FormulaSucceeded})
	bad.Data = []byte(`{"status": 7}`)
	good := h.event(&events.FormulaEvent{Ref: h.ref("a", 1), Status: dag.FormulaSucceeded})
	errs := h.e.HandleBatch(context.Background(), []*consume.Event{bad, good})
	if !unusable(errs[0]) || errs[1] != nil {
		t.Fatalf("errs %v", errs)
	}
	wantStored(t, h, "b ready", "dispatch b create g1")
}

// A restarted planner resumes from what was saved.
func TestResumeAfterRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, err := h.e.Submit(context.Background(), []byte(chain), false, operator) // accepted, never started
	must(t, err)
	h.stored()
	h.fresh()
	failed, err := h.e.Resume(context.Background())
	must(t, err)
	if len(failed) != 0 {
		t.Fatalf("failed %v", failed)
	}
	wantStored(t, h, "workflow running", "a ready", "dispatch a create g1")
	keys, _ := h.workflows.Keys(context.Background(), "")
	h.id = keys[0]
	h.fresh()
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	wantStored(t, h, "b ready", "dispatch b create g1")
}

// Two planners on one run: the one whose copy in memory is behind what
// the other saved reloads the run before stepping it, so the event applies
// to the saved state (nothing new here: b was dispatched by the other).
// A write that still loses the compare-and-set (both stepped the same
// revision at once) is errStale, and the event is redelivered.
func TestStaleSnapshotIsDetected(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	must(t, h.submit(chain))
	other := *h
	other.fresh()
	must(t, other.formula("a", 1, dag.FormulaRunning))
	must(t, h.formula("a", 1, dag.FormulaRunning))       // nothing to save
	must(t, other.formula("a", 1, dag.FormulaSucceeded)) // other saves first
	h.stored()
	must(t, h.formula("a", 1, dag.FormulaSucceeded)) // reloaded: nothing new
	if got := h.stored(); len(got) != 0 {
		t.Fatalf("a stale copy acted: %q", got)
	}
	if h.snapshot() != "sr" {
		t.Fatalf("snapshot %s", h.snapshot())
	}
	// The compare-and-set is the backstop: a snapshot written between the
	// check and the write is still found.
	r := h.e.cache[h.id]
	r.snapRev--
	r.checked = true
	h.e.checked = append(h.e.checked, r)
	r.dirty = true
	h.e.dirty = append(h.e.dirty, r)
	if err := h.e.commit(context.Background()); !errors.Is(err, errStale) {
		t.Fatalf("err %v, want errStale", err)
	}
}

// A run that fails names every failed formula with why it failed (the
// executor's error, a health gate's failure), the first five and how many
// more; a restarted planner says the same (the whys are in the run state).
func TestFailedReasonNamesEveryFailure(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		formulas int
		want     string
	}{
		{1, "formula f0: node(s) failed: n"},
		{3, "3 formulas failed: formula f0: node(s) failed: n; formula f1: health gate failed after 3 checks: pg_isready: no response; formula f2: node(s) failed: n"},
		{7, "7 formulas failed: formula f0: node(s) failed: n; formula f1: health gate failed after 3 checks: pg_isready: no response; formula f2: node(s) failed: n; formula f3: node(s) failed: n; formula f4: node(s) failed: n; and 2 more (gantry status ID lists them)"},
	} {
		h := newHarness(t)
		yaml := "name: w\non_failure: continue\nhosts: {h1: {transport: local}}\nformulas:\n"
		for i := range c.formulas {
			yaml += fmt.Sprintf("  - {id: f%d, server: h1, nodes: [{name: n, run: 'true'}], health_gate: {check: 'true', retries: 3, timeout: 10s}}\n", i)
		}
		must(t, h.submit(yaml))
		for i := range c.formulas {
			f := fmt.Sprintf("f%d", i)
			if i == 1 {
				must(t, h.formula(f, 1, dag.FormulaSucceeded))
				if i == c.formulas-1 {
					h.fresh()
				}
				must(t, h.health(f, 1, false))
				continue
			}
			if i == c.formulas-1 {
				h.fresh()
			}
			must(t, h.handle(&events.FormulaEvent{Ref: h.ref(f, 1), Status: dag.FormulaFailed, Run: events.Run{Error: "node(s) failed: n"}}))
		}
		got := h.stored()
		want := "workflow failed: " + strings.ReplaceAll(c.want, "ID", h.id)
		if !slices.Contains(got, want) {
			t.Errorf("%d failed: stored\n  %s\nwant\n  %s", c.formulas, strings.Join(got, "\n  "), want)
		}
	}
}

// A pause is in the run state the executors read before they start a
// node (so a running formula's next node waits), saved before the pause
// is answered; the resume takes it out.
func TestPauseIsInTheRunState(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	must(t, h.submit(chain))
	runStatus := func() dag.WorkflowState {
		snap, _, err := h.runs.Get(context.Background(), h.id)
		must(t, err)
		return snap.Status
	}
	must(t, h.control(events.VerbPause))
	if st := runStatus(); st != dag.WorkflowPaused {
		t.Fatalf("run state after the pause: %s, want paused", st)
	}
	must(t, h.control(events.VerbResume))
	if st := runStatus(); st != dag.WorkflowRunning {
		t.Fatalf("run state after the resume: %s, want running", st)
	}
}
