package formula

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// When a node's turn comes on its host (its attempt holds the host lock
// and has started nothing), a create that another workflow of the
// composition has put in place there with the same spec since this
// workflow was planned is skipped as already succeeded, naming that
// workflow, and recorded so; anything else runs. What decides is the
// other workflow's record in gantry_nodes (written by executors only);
// the host only names the attempt that held the lock last, and its exit
// status.
func TestSkipAtTheTurn(t *testing.T) {
	t.Parallel()
	const (
		other  = "w0"
		lock   = "w.f.n"      // composition w, formula f, node n
		mark   = "create.h-n" // node n's operation and spec hash
		before = 10           // the revision the plan read: records 1-10 were known
	)
	otherRun := "w0.1.create.f.n.1.run"
	otherKey := events.NodeKey(other, dag.OpCreate, "f", "n")
	succeeded := Record{Status: dag.NodeSucceeded, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"}
	// recorded writes the other workflow's record as its executor did:
	// known when this workflow was planned (at revision 10), or after.
	recorded := func(h *harness, r Record, afterThePlan bool) {
		n := 9
		if afterThePlan {
			n = 11
		}
		for i := range n { // other records before it
			h.records.Set(events.NodeKey("filler", dag.OpCreate, "f", string(rune('a'+i))), Record{Status: dag.NodeFailed})
		}
		h.records.Set(otherKey, r)
	}
	held := func(h *harness, attempt, mark string, exit int, waited bool) {
		h.host.holders[lock] = hostexec.Holder{Attempt: attempt, Mark: mark, ExitCode: exit, Waited: waited}
	}
	create := func(after *uint64) *events.Dispatch {
		d := dispatch(dag.OpCreate, 1, node("n", "install", 1))
		d.SkipAtTurnAfter = after
		return d
	}
	planned := uint64(before)
	skippedEvents := []string{"f running", "n running 1", "n skipped 1: already succeeded with the same spec in workflow w0", "f succeeded"}
	ranEvents := []string{"f running", "n running 1", "n succeeded 1", "f succeeded"}
	cases := []struct {
		name    string
		arrange func(h *harness)
		d       *events.Dispatch
		want    []string
		ran     []string
		asked   bool   // the host asked at the turn
		status  string // the node's record after
	}{{
		name: "another workflow put it in place after the plan, while this one waited for it: skipped",
		arrange: func(h *harness) {
			recorded(h, succeeded, true)
			held(h, otherRun, mark, 0, true)
		},
		d: create(&planned), want: skippedEvents, asked: true, status: "skipped",
	}, {
		name: "it did so before this one's dispatch came (nobody waited): skipped",
		arrange: func(h *harness) {
			recorded(h, succeeded, true)
			held(h, otherRun, mark, 0, false)
		},
		d: create(&planned), want: skippedEvents, asked: true, status: "skipped",
	}, {
		name: "its check passed there (in place): skipped",
		arrange: func(h *harness) {
			recorded(h, Record{Status: dag.NodeSkipped, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"}, true)
			held(h, "w0.1.create.f.n.1.check", mark, 0, true)
		},
		d: create(&planned), want: skippedEvents, asked: true, status: "skipped",
	}, {
		name: "its executor has not recorded the end the host shows yet: skipped",
		arrange: func(h *harness) {
			recorded(h, Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"}, false)
			held(h, otherRun, mark, 0, true)
		},
		d: create(&planned), want: skippedEvents, asked: true, status: "skipped",
	}, {
		name: "known when this workflow was planned (and run again on purpose): runs",
		arrange: func(h *harness) {
			recorded(h, succeeded, false)
			held(h, otherRun, mark, 0, false)
		},
		d: create(&planned), want: ranEvents, ran: []string{"install"}, asked: true, status: "succeeded",
	}, {
		name: "recorded with another spec: runs",
		arrange: func(h *harness) {
			recorded(h, Record{Status: dag.NodeSucceeded, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-old"}, true)
			held(h, otherRun, mark, 0, true)
		},
		d: create(&planned), want: ranEvents, ran: []string{"install"}, asked: true, status: "succeeded",
	}, {
		name: "recorded failed: runs",
		arrange: func(h *harness) {
			recorded(h, Record{Status: dag.NodeFailed, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"}, true)
			held(h, otherRun, mark, 0, true)
		},
		d: create(&planned), want: ranEvents, ran: []string{"install"}, asked: true, status: "succeeded",
	}, {
		name: "recorded running another attempt than the host's: runs",
		arrange: func(h *harness) {
			recorded(h, Record{Status: dag.NodeRunning, Attempt: 2, Generation: 1, GenAttempts: 2, SpecHash: "h-n"}, true)
			held(h, otherRun, mark, 0, true)
		},
		d: create(&planned), want: ranEvents, ran: []string{"install"}, asked: true, status: "succeeded",
	}, {
		name: "it failed on the host: runs",
		arrange: func(h *harness) {
			recorded(h, Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"}, true)
			held(h, otherRun, mark, 1, true)
		},
		d: create(&planned), want: ranEvents, ran: []string{"install"}, asked: true, status: "succeeded",
	}, {
		name: "a delete of the node ran there last: a create runs",
		arrange: func(h *harness) {
			recorded(h, succeeded, true)
			h.records.Set(events.NodeKey(other, dag.OpDelete, "f", "n"), succeeded)
			held(h, "w0.2.delete.f.n.1.run", "delete.h-n", 0, true)
		},
		d: create(&planned), want: ranEvents, ran: []string{"install"}, asked: true, status: "succeeded",
	}, {
		name: "a delete after a create is never skipped",
		arrange: func(h *harness) {
			recorded(h, succeeded, true)
			held(h, otherRun, mark, 0, true)
		},
		d: func() *events.Dispatch {
			d := dispatch(dag.OpDelete, 1, node("n", "uninstall", 1))
			d.SkipAtTurnAfter = &planned // not sent for a delete; not heeded either
			return d
		}(),
		want: ranEvents, ran: []string{"uninstall"}, status: "succeeded",
	}, {
		name: "reset: true (no revision sent): runs, and is not asked",
		arrange: func(h *harness) {
			recorded(h, succeeded, true)
			held(h, otherRun, mark, 0, true)
		},
		d: create(nil), want: ranEvents, ran: []string{"install"}, status: "succeeded",
	}, {
		name: "this workflow's own earlier run: runs",
		arrange: func(h *harness) {
			h.records.Set(events.NodeKey("w1", dag.OpCreate, "f", "n"), Record{Status: dag.NodeFailed, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"})
			held(h, "w1.1.create.f.n.1.run", mark, 0, true)
		},
		d:    func() *events.Dispatch { d := create(&planned); d.Generation = 2; return d }(),
		want: []string{"f running", "n running 2", "n succeeded 2", "f succeeded"}, ran: []string{"install"}, asked: true, status: "succeeded",
	}, {
		name: "the other workflow's record cannot be read: runs",
		arrange: func(h *harness) {
			recorded(h, succeeded, true)
			held(h, otherRun, mark, 0, true)
			h.records.Fail = func(op, key string) error {
				if op == "get" && key == otherKey {
					return errors.New("no responders")
				}
				return nil
			}
		},
		d: create(&planned), want: ranEvents, ran: []string{"install"}, asked: true, status: "succeeded",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness()
			tc.arrange(h)
			if err := h.x.Run(context.Background(), tc.d); err != nil {
				t.Fatal(err)
			}
			if got := h.stored(); !slices.Equal(got, tc.want) {
				t.Fatalf("events\n  %q\nwant\n  %q", got, tc.want)
			}
			if got := h.host.scripts(); !slices.Equal(got, tc.ran) {
				t.Fatalf("ran %q on the host, want %q", got, tc.ran)
			}
			if asked := len(h.host.turns) > 0; asked != tc.asked {
				t.Fatalf("asked at the turn: %v, want %v", asked, tc.asked)
			}
			rec := h.record(tc.d.Operation, "n")
			if string(rec.Status) != tc.status || rec.SpecHash != "h-n" && tc.d.Operation == dag.OpCreate {
				t.Fatalf("record %+v, want %s with the spec hash", rec, tc.status)
			}
		})
	}
}

// A node skipped at its turn is recorded skipped with its spec hash, as
// a success is: the next workflow of the composition finds it in place
// (its plan, from the records; or its own turn, which still finds the
// attempt that ran it holding the lock last), and an attempt left behind
// by a skip does not stay running.
func TestSkippedAtTheTurnIsRecordedForTheNextOnes(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.records.Set(events.NodeKey("w0", dag.OpCreate, "f", "n"), Record{Status: dag.NodeSucceeded, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"})
	h.host.holders["w.f.n"] = hostexec.Holder{Attempt: "w0.1.create.f.n.1.run", Mark: "create.h-n", ExitCode: 0}
	after := uint64(0)
	for _, id := range []string{"w1", "w2"} {
		d := dispatch(dag.OpCreate, 1, node("n", "install", 1))
		d.WorkflowID, d.SkipAtTurnAfter = id, &after
		if err := h.x.Run(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		rec, _, err := h.records.Get(context.Background(), events.NodeKey(id, dag.OpCreate, "f", "n"))
		started := rec.StartedAt
		rec.StartedAt = nil
		if err != nil || started == nil || !reflect.DeepEqual(rec, Record{Status: dag.NodeSkipped, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"}) {
			t.Fatalf("%s: record %+v %v", id, rec, err)
		}
	}
	if got := h.stored(); !slices.Equal(got, []string{
		"f running", "n running 1", "n skipped 1: already succeeded with the same spec in workflow w0", "f succeeded",
		"f running", "n running 1", "n skipped 1: already succeeded with the same spec in workflow w0", "f succeeded"}) {
		t.Fatalf("events %q", got)
	}
	if ran := h.host.scripts(); len(ran) != 0 {
		t.Fatalf("ran %q", ran)
	}
}
