package e2e

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/devstack"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// span is one node attempt that ran: on which host, by which executor, when.
type span struct {
	host, actor  string
	start, end   time.Time
	workflow, fm string
}

// spans reads the node attempts of workflows that ended (succeeded or
// failed) from their node events' started and ended times.
func (s *stack) spans(c *dag.Composition, ids ...string) []span {
	s.t.Helper()
	var out []span
	for _, id := range ids {
		for _, e := range s.events(id) {
			if e.typ.Family() != events.FamilyNode || (e.status != "succeeded" && e.status != "failed") || e.started.IsZero() {
				continue
			}
			server := ""
			for _, f := range c.Formulas {
				if f.ID == e.formula {
					server = f.Server
				}
			}
			out = append(out, span{host: server, actor: e.actor, start: e.started, end: e.ended, workflow: id, fm: e.formula})
		}
	}
	return out
}

// maxRunning is the most spans running at once among those keep selects.
func maxRunning(ss []span, keep func(span) bool) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var es []edge
	for _, s := range ss {
		if keep(s) {
			es = append(es, edge{s.start, +1}, edge{s.end, -1})
		}
	}
	// At equal times an end comes before a start: end and start meeting is
	// not overlapping.
	sort.Slice(es, func(i, j int) bool {
		if es[i].at.Equal(es[j].at) {
			return es[i].delta < es[j].delta
		}
		return es[i].at.Before(es[j].at)
	})
	n, most := 0, 0
	for _, e := range es {
		n += e.delta
		most = max(most, n)
	}
	return most
}

func actors(ss []span) map[string]int {
	m := map[string]int{}
	for _, s := range ss {
		m[s.actor]++
	}
	return m
}

// Two executors, three hosts with max_parallel 1 and a label limit of 2
// over them: however the formulas are shared out between the executors,
// no host ever runs two nodes at once and the three never run more than
// two.
func TestLimitsHoldAcrossExecutors(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 3, maxFormulas: 2, executors: []devstack.ExecutorOptions{{Name: "b"}}})
	c := &dag.Composition{Name: "limited", Reset: true, Hosts: map[string]dag.Host{},
		Limits: []dag.Limit{{Labels: map[string]string{"provider": "hetzner"}, MaxParallel: 2}}}
	for i, h := range s.fleet.Hosts {
		name := fmt.Sprintf("h%d", i)
		c.Hosts[name] = dag.Host{Address: h.Addr, User: s.fleet.User, MaxParallel: 1, Labels: map[string]string{"provider": "hetzner"}}
		for k := range 4 {
			c.Formulas = append(c.Formulas, dag.Formula{ID: fmt.Sprintf("f%d-%d", i, k), Server: name,
				Nodes: []dag.Node{{Name: "work", Run: "sleep 0.3"}}})
		}
	}
	id := s.mustSubmit(c)
	if d := s.wait(id, 90*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s", d.Status)
	}
	ss := s.spans(c, id)
	if len(ss) != 12 {
		t.Fatalf("%d node attempts, want 12", len(ss))
	}
	if a := actors(ss); len(a) != 2 {
		t.Fatalf("the nodes ran on %v: the test needs both executors", a)
	}
	for h := range c.Hosts {
		if n := maxRunning(ss, func(sp span) bool { return sp.host == h }); n != 1 {
			t.Errorf("host %s ran %d nodes at once, max_parallel 1", h, n)
		}
	}
	if n := maxRunning(ss, func(span) bool { return true }); n != 2 {
		t.Errorf("the label limit of 2 saw %d nodes at once (want exactly 2: held, and used)", n)
	}
	waits := 0
	for _, e := range s.events(id) {
		if e.status == "running" && strings.HasPrefix(e.reason, "waiting for a slot of limit ") {
			waits++
		}
	}
	if waits == 0 {
		t.Error("no node said it was waiting for a slot")
	}
}

// With room for one node on a host, a priority-90 workflow submitted after
// a priority-10 one, while both wait behind a running node, runs first.
func TestPriorityTakesTheFreeSlotFirst(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1, executors: []devstack.ExecutorOptions{{Name: "b"}}})
	h := s.fleet.Hosts[0]
	comp := func(name string, prio int, run string) *dag.Composition {
		return &dag.Composition{Name: name, Reset: true, Priority: prio,
			Hosts:    map[string]dag.Host{"box": {Address: h.Addr, User: s.fleet.User, MaxParallel: 1}},
			Formulas: []dag.Formula{{ID: "job", Server: "box", Nodes: []dag.Node{{Name: "work", Run: run}}}}}
	}
	waiting := func(id string) func() bool {
		return func() bool {
			for _, e := range s.events(id) {
				if e.status == "running" && strings.HasPrefix(e.reason, "waiting for a slot of limit host box (1 running)") {
					return true
				}
			}
			return false
		}
	}
	first := s.mustSubmit(comp("first", 50, "sleep 2"))
	s.waitFor("the first node to run", 20*time.Second, func() bool { return index(s.events(first), events.FamilyNode, "job", "work", "running") >= 0 })
	low := comp("low", 10, "sleep 0.2")
	lowID := s.mustSubmit(low)
	s.waitFor("the priority-10 node to wait", 20*time.Second, waiting(lowID))
	high := comp("high", 90, "sleep 0.2")
	highID := s.mustSubmit(high)
	s.waitFor("the priority-90 node to wait", 20*time.Second, waiting(highID))
	for _, id := range []string{first, lowID, highID} {
		if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
			t.Fatalf("%s: %s", id, d.Status)
		}
	}
	lo, hi := s.spans(low, lowID), s.spans(high, highID)
	if len(lo) != 1 || len(hi) != 1 {
		t.Fatalf("spans %v %v", lo, hi)
	}
	if !hi[0].start.Before(lo[0].start) {
		t.Errorf("priority 90 started at %s, after priority 10 at %s", hi[0].start.Format(time.StampMicro), lo[0].start.Format(time.StampMicro))
	}
	if all := append(append(s.spans(comp("first", 50, ""), first), lo...), hi...); maxRunning(all, func(span) bool { return true }) != 1 {
		t.Errorf("the host ran more than one node at once: %v", all)
	}
}

// Executors started with --labels zone=... take only the work of their
// zone's hosts; the stack's own executor (no zone) takes none of it.
func TestExecutorsByZone(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 2, executors: []devstack.ExecutorOptions{
		{Name: "eu1", Labels: map[string]string{"zone": "eu-1"}},
		{Name: "eu2", Labels: map[string]string{"zone": "eu-2"}},
	}})
	c := &dag.Composition{Name: "zoned", Reset: true, Hosts: map[string]dag.Host{
		"a": {Address: s.fleet.Hosts[0].Addr, User: s.fleet.User, Labels: map[string]string{"zone": "eu-1"}},
		"b": {Address: s.fleet.Hosts[1].Addr, User: s.fleet.User, Labels: map[string]string{"zone": "eu-2"}},
	}}
	for k := range 4 {
		for _, h := range []string{"a", "b"} {
			c.Formulas = append(c.Formulas, dag.Formula{ID: fmt.Sprintf("%s%d", h, k), Server: h, Nodes: []dag.Node{{Name: "work", Run: "true"}}})
		}
	}
	id := s.mustSubmit(c)
	if d := s.wait(id, 60*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s", d.Status)
	}
	ss := s.spans(c, id)
	if len(ss) != 8 {
		t.Fatalf("%d node attempts, want 8", len(ss))
	}
	want := map[string]string{"a": "-eu1", "b": "-eu2"}
	for _, sp := range ss {
		if !strings.HasSuffix(sp.actor, want[sp.host]) {
			t.Errorf("%s on host %s (zone %s) ran on %s", sp.fm, sp.host, c.Hosts[sp.host].Zone(), sp.actor)
		}
	}
}

// A node waiting for a slot is cancelled at once with its workflow, and
// nothing of it runs.
func TestCancelWhileWaitingForASlot(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	marker := h.Dir + "/waiter-ran"
	comp := func(name, run string) *dag.Composition {
		return &dag.Composition{Name: name, Reset: true,
			Hosts:    map[string]dag.Host{"box": {Address: h.Addr, User: s.fleet.User, MaxParallel: 1}},
			Formulas: []dag.Formula{{ID: "job", Server: "box", Nodes: []dag.Node{{Name: "work", Run: run}}}}}
	}
	busy := s.mustSubmit(comp("busy", "sleep 6"))
	s.waitFor("the busy node to run", 20*time.Second, func() bool { return index(s.events(busy), events.FamilyNode, "job", "work", "running") >= 0 })
	waiter := s.mustSubmit(comp("waiter", "touch "+marker))
	s.waitFor("the second node to wait", 20*time.Second, func() bool {
		for _, e := range s.events(waiter) {
			if e.status == "running" && strings.HasPrefix(e.reason, "waiting for a slot of limit host box") {
				return true
			}
		}
		return false
	})
	start := time.Now()
	if body, code := s.control(waiter, events.VerbCancel); code != "" {
		t.Fatalf("cancel: %s %s", code, body)
	}
	if d := s.wait(waiter, 10*time.Second); d.Status != dag.WorkflowCancelled {
		t.Fatalf("waiter %s", d.Status)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the cancel took %s: it waited for the slot", took)
	}
	if i := index(s.events(waiter), events.FamilyNode, "job", "work", "cancelled"); i < 0 {
		t.Error("no cancelled node event")
	}
	if d := s.wait(busy, 20*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("busy %s", d.Status)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the cancelled node ran")
	}
}

// A formula's next node takes over the slot of the node that ended only
// while nobody waits for it ahead: a priority-90 workflow that waits for
// the host's one slot runs between the two nodes of a priority-50
// formula, not after both.
func TestWaiterGoesBeforeTheFormulasNextNode(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	host := map[string]dag.Host{"box": {Address: h.Addr, User: s.fleet.User, MaxParallel: 1}}
	long := &dag.Composition{Name: "long", Reset: true, Priority: 50, Hosts: host,
		Formulas: []dag.Formula{{ID: "job", Server: "box", Nodes: []dag.Node{{Name: "first", Run: "sleep 1.5"}, {Name: "second", Run: "sleep 0.2"}}}}}
	high := &dag.Composition{Name: "high", Reset: true, Priority: 90, Hosts: host,
		Formulas: []dag.Formula{{ID: "job", Server: "box", Nodes: []dag.Node{{Name: "work", Run: "sleep 0.2"}}}}}
	longID := s.mustSubmit(long)
	s.waitFor("the first node to run", 20*time.Second, func() bool { return index(s.events(longID), events.FamilyNode, "job", "first", "running") >= 0 })
	highID := s.mustSubmit(high)
	s.waitFor("the priority-90 node to wait", 20*time.Second, func() bool {
		for _, e := range s.events(highID) {
			if e.status == "running" && strings.HasPrefix(e.reason, "waiting for a slot of limit host box") {
				return true
			}
		}
		return false
	})
	for _, id := range []string{longID, highID} {
		if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
			t.Fatalf("%s: %s", id, d.Status)
		}
	}
	ls, hs := s.spans(long, longID), s.spans(high, highID)
	if len(ls) != 2 || len(hs) != 1 {
		t.Fatalf("spans %v %v", ls, hs)
	}
	second := ls[0]
	if ls[1].start.After(second.start) {
		second = ls[1]
	}
	if !hs[0].start.Before(second.start) {
		t.Errorf("the priority-90 node started at %s, after the formula's second node at %s", hs[0].start.Format(time.StampMicro), second.start.Format(time.StampMicro))
	}
	if n := maxRunning(append(ls, hs...), func(span) bool { return true }); n != 1 {
		t.Errorf("the host ran %d nodes at once, max_parallel 1", n)
	}
}
