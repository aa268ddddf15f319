package formula

import (
	"context"
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// interloper is the scripted host, with another executor writing the
// node's record once the attempt is recorded running (the dispatch
// redelivered to it while this one still runs the attempt).
type interloper struct {
	*host
	write func()
}

func (r interloper) run(ctx context.Context, cmd hostexec.Attempt, settle bool) (hostexec.Result, error) {
	if before := cmd.BeforeStart; before != nil {
		cmd.BeforeStart = func() error {
			if err := before(); err != nil {
				return err
			}
			r.write()
			return nil
		}
	}
	return r.host.run(ctx, cmd, settle)
}

// Another executor re-attached to the same attempt, writing its record
// again as running: the outcome is written over that record, at once.
func TestOutcomeIsWrittenOverAReattachedRecord(t *testing.T) {
	t.Parallel()
	h := newHarness()
	key := h.key(dag.OpCreate, "n")
	h.x.Hosts = runners{r: fake{interloper{host: h.host, write: func() {
		h.records.Set(key, Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"})
	}}}}
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "ok", 1))); err != nil {
		t.Fatal(err)
	}
	if got, want := h.stored(), []string{"f running", "n running 1", "n succeeded 1", "f succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if rec := h.record(dag.OpCreate, "n"); rec.Status != dag.NodeSucceeded || rec.Attempt != 1 {
		t.Fatalf("record %+v, want succeeded at attempt 1", rec)
	}
	if len(h.host.settled) != 0 {
		t.Fatalf("settled %q: the outcome was not written at once", h.host.settled)
	}
}

// Another executor recorded the attempt's end meanwhile: that record
// stands, and the node is decided from it.
func TestOutcomeLeavesARecordThatMovedOn(t *testing.T) {
	t.Parallel()
	h := newHarness()
	key := h.key(dag.OpCreate, "n")
	h.host.exits["fails"] = []int{1}
	h.x.Hosts = runners{r: fake{interloper{host: h.host, write: func() {
		h.records.Set(key, Record{Status: dag.NodeSucceeded, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"})
	}}}}
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "fails", 1))); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(dag.OpCreate, "n"); rec.Status != dag.NodeSucceeded || rec.Attempt != 1 {
		t.Fatalf("record %+v, want the other executor's succeeded", rec)
	}
	got := h.stored()
	if len(got) < 2 || got[len(got)-2] != "n succeeded 1: already recorded succeeded" {
		t.Fatalf("events %q: the node is not decided from the record that moved on", got)
	}
}
