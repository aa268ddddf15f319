package formula

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

func TestNodeTransitions(t *testing.T) {
	t.Parallel()
	op := dag.OpCreate
	cases := []struct {
		name    string
		arrange func(h *harness)
		d       *events.Dispatch
		want    []string // events stored, in order
		ran     []string // scripts started on the host, in order
		record  Record   // n's record after (Status, Attempt, GenAttempts)
	}{{
		name: "succeeds",
		d:    dispatch(op, 1, node("n", "ok", 1)),
		want: []string{"f running", "n running 1", "n succeeded 1", "f succeeded"},
		ran:  []string{"ok"}, record: Record{Status: dag.NodeSucceeded, Attempt: 1, GenAttempts: 1},
	}, {
		name:    "retried until it succeeds",
		arrange: func(h *harness) { h.host.exits["flaky"] = []int{1, 1, 0} },
		d:       dispatch(op, 1, node("n", "flaky", 3)),
		want: []string{"f running", "n running 1", "n failed 1 retry: exit status 1", "n running 2", "n failed 2 retry: exit status 1",
			"n running 3", "n succeeded 3", "f succeeded"},
		ran: []string{"flaky", "flaky", "flaky"}, record: Record{Status: dag.NodeSucceeded, Attempt: 3, GenAttempts: 3},
	}, {
		name:    "fails when its attempts are used up",
		arrange: func(h *harness) { h.host.exits["bad"] = []int{2} },
		d:       dispatch(op, 1, node("n", "bad", 2)),
		want: []string{"f running", "n running 1", "n failed 1 retry: exit status 2", "n running 2", "n failed 2: exit status 2",
			"f failed: node(s) failed: n"},
		ran: []string{"bad", "bad"}, record: Record{Status: dag.NodeFailed, Attempt: 2, GenAttempts: 2},
	}, {
		name: "a passing check skips the command",
		d:    dispatch(op, 1, events.WorkNode{Name: "n", Command: "install", Check: "installed?", Retry: dag.RetryPolicy{MaxAttempts: 1}}),
		want: []string{"f running", "n running 1", "n skipped 1: check passed", "f succeeded"},
		ran:  []string{"installed?"}, record: Record{Status: dag.NodeSkipped, Attempt: 1, GenAttempts: 1},
	}, {
		name:    "a failing check runs the command",
		arrange: func(h *harness) { h.host.exits["installed?"] = []int{1} },
		d:       dispatch(op, 1, events.WorkNode{Name: "n", Command: "install", Check: "installed?", Retry: dag.RetryPolicy{MaxAttempts: 1}}),
		want:    []string{"f running", "n running 1", "n succeeded 1", "f succeeded"},
		ran:     []string{"installed?", "install"}, record: Record{Status: dag.NodeSucceeded, Attempt: 1, GenAttempts: 1},
	}, {
		name: "already done on the host: skipped, nothing runs",
		d:    dispatch(op, 1, func() events.WorkNode { n := node("n", "ok", 1); n.AlreadyDone = true; return n }()),
		want: []string{"f running", "n skipped 0: already succeeded with the same spec", "f succeeded"},
		ran:  nil, record: Record{Status: dag.NodeSkipped},
	}, {
		// The attempt's running is published again before its end (its
		// first copy may have been lost with that delivery).
		name: "recorded succeeded by an earlier delivery: not run again",
		arrange: func(h *harness) {
			h.records.Set(h.key(op, "n"), Record{Status: dag.NodeSucceeded, Attempt: 1, Generation: 1, GenAttempts: 1})
		},
		d:    dispatch(op, 1, node("n", "ok", 3)),
		want: []string{"f running", "n running 1", "n succeeded 1: already recorded succeeded", "f succeeded"},
		ran:  nil, record: Record{Status: dag.NodeSucceeded, Attempt: 1, GenAttempts: 1},
	}, {
		name: "recorded failed earlier in this generation: not run again",
		arrange: func(h *harness) {
			h.records.Set(h.key(op, "n"), Record{Status: dag.NodeFailed, Attempt: 1, Generation: 1, GenAttempts: 1})
		},
		d:    dispatch(op, 1, node("n", "ok", 3)),
		want: []string{"f running", "n running 1", "n failed 1: failed earlier in this run", "f failed: node(s) failed: n"},
		ran:  nil, record: Record{Status: dag.NodeFailed, Attempt: 1, GenAttempts: 1},
	}, {
		name: "failed in an earlier generation: a retry runs it again",
		arrange: func(h *harness) {
			h.records.Set(h.key(op, "n"), Record{Status: dag.NodeFailed, Attempt: 1, Generation: 1, GenAttempts: 1})
		},
		d:    dispatch(op, 2, node("n", "ok", 1)),
		want: []string{"f running", "n running 2", "n succeeded 2", "f succeeded"},
		ran:  []string{"ok"}, record: Record{Status: dag.NodeSucceeded, Attempt: 2, GenAttempts: 1},
	}, {
		name: "interrupted: the attempt is resumed on the host, not counted again",
		arrange: func(h *harness) {
			h.records.Set(h.key(op, "n"), Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1})
		},
		d:    dispatch(op, 1, node("n", "ok", 3)),
		want: []string{"f running", "n running 1", "n succeeded 1", "f succeeded"},
		ran:  []string{"ok"}, record: Record{Status: dag.NodeSucceeded, Attempt: 1, GenAttempts: 1},
	}, {
		name: "interrupted on its last attempt: resumed, not failed",
		arrange: func(h *harness) {
			h.records.Set(h.key(op, "n"), Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1})
		},
		d:    dispatch(op, 1, node("n", "ok", 1)),
		want: []string{"f running", "n running 1", "n succeeded 1", "f succeeded"},
		ran:  []string{"ok"}, record: Record{Status: dag.NodeSucceeded, Attempt: 1, GenAttempts: 1},
	}, {
		name:    "a damaged record is replaced, and the node runs",
		arrange: func(h *harness) { h.records.SetRaw(h.key(op, "n"), []byte("{oops")) },
		d:       dispatch(op, 1, node("n", "ok", 1)),
		want:    []string{"f running", "n running 1", "n succeeded 1", "f succeeded"},
		ran:     []string{"ok"}, record: Record{Status: dag.NodeSucceeded, Attempt: 1, GenAttempts: 1},
	}, {
		name:    "an unreachable host fails at once, without retries",
		arrange: func(h *harness) { h.x.Hosts = runners{err: errors.New("no key for user deploy")} },
		d:       dispatch(op, 1, node("n", "ok", 3)),
		want: []string{"f running", "n running 1", "n failed 1 unreachable: host unreachable: no key for user deploy",
			"f failed: node(s) failed: n"},
		ran: nil, record: Record{Status: dag.NodeFailed, Attempt: 1, GenAttempts: 1},
	}, {
		name:    "a failed node blocks its dependents",
		arrange: func(h *harness) { h.host.exits["bad"] = []int{1} },
		d:       dispatch(op, 1, node("n", "bad", 1), node("m", "ok", 1, "n")),
		want:    []string{"f running", "n running 1", "n failed 1: exit status 1", "m blocked 0", "f failed: node(s) failed: n"},
		ran:     []string{"bad"}, record: Record{Status: dag.NodeFailed, Attempt: 1, GenAttempts: 1},
	}, {
		name: "check: exit 0 is ok",
		d:    dispatch(dag.OpCheck, 1, node("n", "same?", 1)),
		want: []string{"f running", "n running 1", "n succeeded 1 ok", "f succeeded"},
		ran:  []string{"same?"}, record: Record{Status: dag.NodeSucceeded, Attempt: 1, GenAttempts: 1},
	}, {
		name:    "check: another exit status would change",
		arrange: func(h *harness) { h.host.exits["same?"] = []int{1} },
		d:       dispatch(dag.OpCheck, 1, node("n", "same?", 1)),
		want:    []string{"f running", "n running 1", "n succeeded 1 would_change", "f succeeded"},
		ran:     []string{"same?"}, record: Record{Status: dag.NodeSucceeded, Attempt: 1, GenAttempts: 1},
	}, {
		name:    "a cancelled run's dispatch is skipped: its nodes are cancelled",
		arrange: func(h *harness) { h.runs.Set("w1", events.RunSnapshot{Generation: 1, Status: dag.WorkflowCancelled}) },
		d:       dispatch(op, 1, node("n", "ok", 1)),
		want:    []string{"n cancelled 0: not started: the workflow was cancelled", "f cancelled"},
	}, {
		name:    "a superseded generation's dispatch is skipped",
		arrange: func(h *harness) { h.runs.Set("w1", events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning}) },
		d:       dispatch(op, 1, node("n", "ok", 1)),
		want:    []string{"f cancelled"},
	}}
	cases = append(cases, struct {
		name    string
		arrange func(h *harness)
		d       *events.Dispatch
		want    []string
		ran     []string
		record  Record
	}{
		name: "an interrupted attempt's failure counts once; the next attempt runs",
		arrange: func(h *harness) {
			h.records.Set(h.key(op, "n"), Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1})
			h.host.exits["flaky"] = []int{1, 0}
		},
		d:    dispatch(op, 1, node("n", "flaky", 2)),
		want: []string{"f running", "n running 1", "n failed 1 retry: exit status 1", "n running 2", "n succeeded 2", "f succeeded"},
		ran:  []string{"flaky", "flaky"}, record: Record{Status: dag.NodeSucceeded, Attempt: 2, GenAttempts: 2},
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness()
			if c.arrange != nil {
				c.arrange(h)
			}
			if err := h.x.Run(context.Background(), c.d); err != nil {
				t.Fatal(err)
			}
			if got := h.stored(); !slices.Equal(got, c.want) {
				t.Fatalf("stored\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
			if got := h.host.scripts(); !slices.Equal(got, c.ran) {
				t.Fatalf("ran %q, want %q", got, c.ran)
			}
			got := h.record(c.d.Operation, "n")
			if got.Status != c.record.Status || got.Attempt != c.record.Attempt || got.GenAttempts != c.record.GenAttempts {
				t.Fatalf("record %+v, want %+v", got, c.record)
			}
		})
	}
}

// refusing is a host whose sshd port is closed.
type refusing struct{}

func (refusing) run(context.Context, hostexec.Attempt, bool) (hostexec.Result, error) {
	return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w to 127.0.0.1:1: connection refused", hostexec.ErrConnect)
}

// Each attempt's commands run under their own durable id on the host, and
// a resumed attempt under the same one.
func TestAttemptIDs(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.records.Set(h.key(dag.OpCreate, "n"), Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1})
	h.host.exits["probe"] = []int{1}
	h.host.exits["flaky"] = []int{1, 0}
	n := node("n", "flaky", 2)
	n.Check = "probe"
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, n)); err != nil {
		t.Fatal(err)
	}
	want := []string{"w1.1.create.f.n.1.check", "w1.1.create.f.n.1.run", "w1.1.create.f.n.2.check", "w1.1.create.f.n.2.run"}
	if got := h.host.attempts; !slices.Equal(got, want) {
		t.Fatalf("attempt ids %q, want %q", got, want)
	}
}

// After a workflow retry, attempts count again from 1 against the node's
// max_attempts; Attempt keeps counting every generation's.
func TestAttemptNumbersAfterARetry(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.records.Set(h.key(dag.OpCreate, "n"), Record{Status: dag.NodeFailed, Attempt: 3, Generation: 1, GenAttempts: 3})
	h.host.exits["flaky"] = []int{1, 0}
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 2, node("n", "flaky", 3))); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range h.bus.out.Stored() {
		if n, ok := e.Payload.(*events.NodeEvent); ok {
			got = append(got, fmt.Sprintf("%s %d/%d of %d", n.Status, n.GenAttempt, n.Attempt, n.MaxAttempts))
		}
	}
	want := []string{"running 1/4 of 3", "failed 1/4 of 3", "running 2/5 of 3", "succeeded 2/5 of 3"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// An attempt that waits for the host lock says so as a node event, naming
// the workflow it waits for, or "another workflow" when the lock's holder
// had not named itself yet.
func TestWaitingForTheHostLockIsAnnounced(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ holder, want string }{
		{"0190aaaa-bbbb.1.create.f.n.1.run", "n running 1: waiting for workflow 0190aaaa-bbbb (the same node runs there) on this host"},
		{"", "n running 1: waiting for another workflow (the same node runs there) on this host"},
	} {
		h := newHarness()
		h.x.Hosts = runners{r: fake{waitingHost{holder: c.holder}}}
		if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "ok", 1))); err != nil {
			t.Fatal(err)
		}
		if got := h.stored(); !slices.Contains(got, c.want) {
			t.Fatalf("holder %q: stored %q, want %q among them", c.holder, got, c.want)
		}
	}
}

// waitingHost prints what a durable command prints while it waits for its
// host lock (for holder), then succeeds.
type waitingHost struct{ holder string }

func (w waitingHost) run(_ context.Context, cmd hostexec.Attempt, _ bool) (hostexec.Result, error) {
	if err := cmd.BeforeStart(); err != nil {
		return hostexec.Result{ExitCode: -1}, err
	}
	cmd.OnLine(hostexec.Stderr, "gantry: waiting for "+w.holder+" on this host")
	return hostexec.Result{}, nil
}
