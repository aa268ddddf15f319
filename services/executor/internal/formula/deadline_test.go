package formula

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A formula whose timeout passed is stopped here on the planner's word
// (WorkflowEvent.Stopping): its running node is killed on the host, what
// has not started never starts, and the formula fails with the reason
// deadline. Another formula of the same workflow, and the same formula
// of another generation, go on.
func TestStopForDeadlineKillsOnlyThatFormula(t *testing.T) {
	t.Parallel()
	h := newHarness()
	d := dispatch(dag.OpCreate, 1, node("n", "block-f", 3), node("m", "ok", 1, "n"))
	d.Timeout = dag.Duration(3 * time.Second)
	other := dispatch(dag.OpCreate, 1, node("o", "block-g", 1))
	other.Formula = "g"
	done := make(chan error, 2)
	go func() { done <- h.x.Run(context.Background(), d) }()
	go func() { done <- h.x.Run(context.Background(), other) }()
	for range 2 {
		select {
		case <-h.host.start:
		case <-time.After(10 * time.Second):
			t.Fatal("the nodes never started")
		}
	}
	h.x.StopFormulas("w1", 2, []string{"f"}) // another generation's: nothing here
	h.x.StopFormulas("w1", 1, []string{"f"})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the formula did not end after the stop")
	}
	if got, want := h.storedOf("f"), []string{"f running", "n running 1", "n cancelled 1: cancelled: formula f's timeout of 3s passed: killed on the host",
		"m blocked 0", "f failed: deadline: formula f's timeout of 3s passed with 2 node(s) unfinished (n, m)"}; !slices.Equal(got, want) {
		t.Fatalf("stored\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if r := h.record(dag.OpCreate, "n"); r.Status != dag.NodeCancelled || r.GenAttempts != 1 {
		t.Fatalf("record of n %+v: the kill is not a failed attempt to retry", r)
	}
	select {
	case <-done:
		t.Fatal("the other formula ended too")
	case <-time.After(100 * time.Millisecond):
	}
	h.x.CancelWorkflow("w1")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := h.storedOf("g"); got[len(got)-1] != "g cancelled" {
		t.Fatalf("the other formula: %v", got)
	}
}

// A dispatch of a formula whose timeout passed before it arrived starts
// nothing: seen in the run snapshot (Expired), or on the bus before the
// snapshot says so; the formula fails with the reason deadline. The
// same formula in a retry (a later generation) runs.
func TestExpiredDispatchStartsNothing(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"run snapshot", "bus"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			h := newHarness()
			if how == "run snapshot" {
				h.runs.Set("w1", events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning, Expired: []string{"f"}})
			} else {
				h.x.StopFormulas("w1", 1, []string{"f"})
			}
			d := dispatch(dag.OpCreate, 1, node("n", "ok", 1))
			d.Timeout = dag.Duration(time.Minute)
			if err := h.x.Run(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			if got, want := h.stored(), []string{"n cancelled 0: not started: formula f's timeout of 1m0s passed",
				"f failed: deadline: formula f's timeout of 1m0s passed with 1 node(s) unfinished (n)"}; !slices.Equal(got, want) {
				t.Fatalf("stored\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			if ran := h.host.scripts(); len(ran) != 0 {
				t.Fatalf("ran %v", ran)
			}
			h.runs.Set("w1", events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning})
			if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 2, node("n", "ok", 1))); err != nil {
				t.Fatal(err)
			}
			if ran := h.host.scripts(); !slices.Equal(ran, []string{"ok"}) {
				t.Fatalf("the retry ran %v", ran)
			}
		})
	}
}

// storedOf describes the events stored about formula f, one line each.
func (h *harness) storedOf(f string) []string {
	var out []string
	for _, e := range h.bus.out.Stored() {
		switch p := e.Payload.(type) {
		case *events.FormulaEvent:
			if p.Formula != f {
				continue
			}
			s := f + " " + string(p.Status)
			if p.Error != "" {
				s += ": " + p.Error
			}
			out = append(out, s)
		case *events.NodeEvent:
			if p.Formula != f {
				continue
			}
			s := p.Node + " " + string(p.Status) + " " + strconv.Itoa(p.Attempt)
			if why := strings.TrimSpace(p.Reason + " " + p.Error); why != "" {
				s += ": " + why
			}
			out = append(out, s)
		}
	}
	return out
}

// A stop for the formula's deadline that the executor missed on the bus
// (its connection down when the planner published it) is read in the run
// state: the formula is stopped within runStateCheck all the same, and
// fails with the reason deadline.
func TestStopMissedOnTheBusStillStopsTheFormula(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning})
	d := dispatch(dag.OpCreate, 1, node("n", "block-n", 1), node("m", "after", 1, "n"))
	d.Timeout = dag.Duration(3 * time.Second)
	done := make(chan error, 1)
	go func() { done <- h.x.Run(context.Background(), d) }()
	<-h.host.start
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning, Expired: []string{"f"}})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the formula ran on after its timeout passed (the stop was not seen on the bus)")
	}
	got := h.stored()
	if last := got[len(got)-1]; last != "f failed: deadline: formula f's timeout of 3s passed with 2 node(s) unfinished (n, m)" {
		t.Fatalf("stored %v", got)
	}
	if ran := h.host.scripts(); slices.Contains(ran, "after") {
		t.Fatalf("a node started after the stop: ran %q", ran)
	}
}
