package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Two submissions of one composition 100 ms apart, over a real sshd (and
// with transport local): the second waits for the first on the host (the
// host lock), and when its node's turn comes the first has put the node in
// place with the same spec: it is skipped there, naming the first
// workflow, and the command runs once. Neither workflow's output holds a
// line of the attempts' bookkeeping (before, over SSH the second's
// follower printed "tail: cannot open ...out" while it waited for the
// lock, and lost the command's stdout).
func TestTwoQuickSubmitsRunTheNodeOnce(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	for _, transport := range []dag.Transport{dag.TransportSSH, dag.TransportLocal} {
		t.Run(string(transport), func(t *testing.T) { twoQuickSubmits(t, s, transport) })
	}
}

func twoQuickSubmits(t *testing.T, s *stack, transport dag.Transport) {
	c, marker := turnComposition(t, s, "once", transport)
	tl := newTimeline()
	tlb := &timeline{t0: tl.t0} // the second workflow's
	defer func() { t.Logf("timeline of the first:\n%s\ntimeline of the second:\n%s", tl, tlb) }()
	a := s.mustSubmit(c())
	tl.at("submitted first " + a)
	s.watchStatus(tl, a)
	time.Sleep(100 * time.Millisecond)
	b := s.mustSubmit(c())
	tlb.at("submitted second " + b)
	s.watchStatus(tlb, b)
	for _, id := range []string{a, b} {
		d := s.wait(id, 60*time.Second)
		st, reason := nodeStatus(s, id, "app", "install")
		at := map[string]*timeline{a: tl, b: tlb}[id]
		at.at(fmt.Sprintf("gantry status: %s; node install %s %q", d.Status, st, reason))
		if d.Status != dag.WorkflowSucceeded {
			t.Fatalf("%s: %s %s", id, d.Status, d.Error)
		}
	}
	if n := markerLines(t, marker); n != 1 {
		t.Errorf("the node ran %d times on the host, want once", n)
	}
	want := "already succeeded with the same spec in workflow " + a
	if st, reason := nodeStatus(s, b, "app", "install"); st != dag.NodeSkipped || !strings.Contains(reason, want) {
		t.Errorf("second workflow's node in its status: %s %q, want skipped with %q", st, reason, want)
	}
	if st, _ := nodeStatus(s, a, "app", "install"); st != dag.NodeSucceeded {
		t.Errorf("first workflow's node in its status: %s, want succeeded", st)
	}
	skipped := false
	for _, e := range s.events(b) {
		if e.node == "install" && e.status == "skipped" {
			skipped = true
			if !strings.Contains(e.reason, want) {
				t.Errorf("skipped event's reason %q, want %q", e.reason, want)
			}
		}
		if e.node == "install" && (e.status == "succeeded" || e.status == "failed") {
			t.Errorf("second workflow's node ended %s, want skipped", e.status)
		}
	}
	if !skipped {
		t.Errorf("no skipped event for the second workflow's node: %v", s.events(b))
	}
	noBookkeeping(t, s, a, b)
	if out := outputOf(t, s, a); !strings.Contains(out, "stdout:done") {
		t.Errorf("the first workflow's stdout is missing: %q", out)
	}
}

// With reset: true the second submission runs the node again once the
// first is done with it (one after the other, not at once), and its
// output is whole: the stdout it printed after waiting for its host lock
// is there, and no line of the attempts' bookkeeping.
func TestTwoQuickSubmitsWithResetRunTwice(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	c, marker := turnComposition(t, s, "reset", dag.TransportSSH)
	a := s.mustSubmit(c())
	time.Sleep(100 * time.Millisecond)
	second := c()
	second.Reset = true
	b := s.mustSubmit(second)
	for _, id := range []string{a, b} {
		if d := s.wait(id, 60*time.Second); d.Status != dag.WorkflowSucceeded {
			t.Fatalf("%s: %s %s", id, d.Status, d.Error)
		}
	}
	if n := markerLines(t, marker); n != 2 {
		t.Errorf("the node ran %d times on the host, want twice", n)
	}
	if st, _ := nodeStatus(s, b, "app", "install"); st != dag.NodeSucceeded {
		t.Errorf("second workflow's node: %s, want succeeded", st)
	}
	noBookkeeping(t, s, a, b)
	for _, id := range []string{a, b} {
		if out := outputOf(t, s, id); !strings.Contains(out, "stdout:done") {
			t.Errorf("%s: the command's stdout is missing from its output: %q", id, out)
		}
	}
}

// turnComposition is a composition of one node on the stack's sshd host
// (or this machine) that sleeps 2 s and then appends a line to a marker
// file, under a name of its own (the host lock is per composition). The
// executor has run something on the host before it returns, so its
// connection (and a host agent, or warm shells) is there: the first
// submission, 100 ms ahead, reaches the host first. (Otherwise both wait
// for the connection to be made, and either may take the host lock first:
// the other then waits, and is skipped at its turn or runs second,
// whichever was submitted first.)
func turnComposition(t *testing.T, s *stack, tag string, transport dag.Transport) (func() *dag.Composition, string) {
	t.Helper()
	h := s.fleet.Hosts[0]
	host := dag.Host{Transport: dag.TransportSSH, Address: h.Addr, User: s.fleet.User}
	dir := h.Dir
	if transport == dag.TransportLocal {
		host, dir = dag.Host{Transport: dag.TransportLocal}, t.TempDir()
	}
	stamp := time.Now().UnixNano() % 1e9
	warm := &dag.Composition{Name: fmt.Sprintf("warm-%s-%d", tag, stamp), Hosts: map[string]dag.Host{"h": host},
		Formulas: []dag.Formula{{ID: "app", Server: "h", Nodes: []dag.Node{{Name: "hello", Run: "true"}}}}}
	if d := s.wait(s.mustSubmit(warm), 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("warming up: %s %s", d.Status, d.Error)
	}
	marker := filepath.Join(dir, "marker-"+tag)
	name := fmt.Sprintf("turn-%s-%d", tag, stamp)
	return func() *dag.Composition {
		return &dag.Composition{Name: name, Hosts: map[string]dag.Host{"h": host},
			Formulas: []dag.Formula{{ID: "app", Server: "h", Nodes: []dag.Node{{Name: "install",
				Run: "sleep 2; echo ran >> " + marker + "; echo done"}}}}}
	}, marker
}

func markerLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "ran\n")
}

// nodeStatus is a node's state and the reason of its last transition, as
// state.workflow answers.
func nodeStatus(s *stack, id, formula, node string) (dag.NodeState, string) {
	s.t.Helper()
	d, err := s.cl.WithTimeout(5*time.Second).Status(context.Background(), id)
	if err != nil {
		s.t.Fatalf("state.workflow %s: %s", id, failure(err))
	}
	if f := d.Formulas[formula]; f != nil {
		if n := f.Nodes[node]; n != nil {
			return n.Status, n.Reason
		}
	}
	return "", ""
}

// outputOf is every output line the workflow's nodes published, as
// "<stream>:<line>", one a line.
func outputOf(t *testing.T, s *stack, id string) string {
	t.Helper()
	var b strings.Builder
	s.workflowEnvelopes(events.StreamLogs, id, func(env *events.Envelope) {
		var l events.LogLine
		if err := json.Unmarshal(env.Data, &l); err != nil {
			t.Fatalf("log line %s: %v", env.Data, err)
		}
		b.WriteString(string(l.Stream) + ":" + l.Line + "\n")
	})
	return b.String()
}

// noBookkeeping fails the test when an output line of the workflows (on
// the logs stream, or in their node events' output tails) comes from the
// attempts' bookkeeping rather than from the command.
func noBookkeeping(t *testing.T, s *stack, ids ...string) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // output lines are sent without waiting
	bad := func(s string) bool { return strings.Contains(s, "tail:") || strings.Contains(s, "cannot open") }
	for _, id := range ids {
		for _, l := range strings.Split(outputOf(t, s, id), "\n") {
			if bad(l) {
				t.Errorf("%s: output line %q", id, l)
			}
		}
		s.workflowEnvelopes(events.StreamEvents, id, func(env *events.Envelope) {
			if env.Type.Family() != events.FamilyNode {
				return
			}
			var n events.NodeEvent
			if err := json.Unmarshal(env.Data, &n); err != nil {
				t.Fatal(err)
			}
			if bad(n.StdoutTail) || bad(n.StderrTail) || bad(n.Error) {
				t.Errorf("%s: node %s %s: stdout %q stderr %q error %q", id, n.Node, n.Status, n.StdoutTail, n.StderrTail, n.Error)
			}
		})
	}
}
