package project

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// The projection's rules, event by event, with no store: what each fold
// makes of a document, and which events it leaves a document alone for.

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func sec(n int) *time.Time { t := t0.Add(time.Duration(n) * time.Second); return &t }

func code(c int) *int { return &c }

// stored is an event stored at stream sequence seq, sec seconds after t0.
func stored(seq uint64, s int) *consume.Event {
	return &consume.Event{Envelope: &events.Envelope{ID: fmt.Sprintf("ev-%d", seq), Time: *sec(s)}, Stream: seq}
}

var ref = events.Ref{WorkflowID: "w1", Workflow: "web", Formula: "f", Host: "h1", Node: "n", Operation: dag.OpCreate, Generation: 1}

func refGen(gen int) events.Ref { r := ref; r.Generation = gen; return r }

// folded checks a fold's answer: the document it left, and whether it
// says it changed it. A case whose want is nil leaves the document as it
// was (before, made again).
func folded[D any](t *testing.T, name string, got *D, changed bool, want *D, before func() *D) {
	t.Helper()
	if want == nil {
		if changed {
			t.Errorf("%s: changed, want left alone", name)
		}
		if b := before(); b != nil && !reflect.DeepEqual(got, b) {
			t.Errorf("%s: left alone, but touched:\n got %+v\nwant %+v", name, *got, *b)
		}
		return
	}
	if !changed {
		t.Errorf("%s: left alone, want changed", name)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", name, *got, *want)
	}
}

func TestFoldWorkflow(t *testing.T) {
	alice := &events.Principal{Name: "alice"}
	running := func() *events.WorkflowDoc {
		return &events.WorkflowDoc{WorkflowID: "w1", Workflow: "web", Operation: dag.OpCreate, Status: dag.WorkflowRunning, Generation: 1,
			CreatedAt: t0, UpdatedAt: *sec(1), LastSeq: 5, EventIDs: []string{"ev-1", "ev-5"}}
	}
	succeeded := func() *events.WorkflowDoc {
		d := running()
		d.Status, d.EndedAt = dag.WorkflowSucceeded, sec(9)
		return d
	}
	for _, c := range []struct {
		name   string
		before func() *events.WorkflowDoc
		ev     *consume.Event
		w      events.WorkflowEvent
		want   *events.WorkflowDoc
	}{
		{name: "accepted starts the summary", before: func() *events.WorkflowDoc { return newWorkflowDoc(stored(1, 0), ref) }, ev: stored(1, 0),
			w: events.WorkflowEvent{Ref: ref, Status: dag.WorkflowAccepted, Formulas: map[events.FormulaState]int{dag.FormulaPending: 2}, TotalNodes: 5, RequestedBy: alice},
			want: &events.WorkflowDoc{WorkflowID: "w1", Workflow: "web", Operation: dag.OpCreate, Status: dag.WorkflowAccepted, Generation: 1, CreatedAt: t0, UpdatedAt: t0,
				LastSeq: 1, EventIDs: []string{"ev-1"}, FormulaCount: 2, NodeCount: 5, SubmittedBy: alice}},
		{name: "accepted, its event stored later: created when accepted", before: func() *events.WorkflowDoc { return newWorkflowDoc(stored(1, 40), ref) }, ev: stored(1, 40),
			w: events.WorkflowEvent{Ref: ref, Status: dag.WorkflowAccepted, Run: events.Run{StartedAt: sec(0)}, Formulas: map[events.FormulaState]int{dag.FormulaPending: 2}, TotalNodes: 5},
			want: &events.WorkflowDoc{WorkflowID: "w1", Workflow: "web", Operation: dag.OpCreate, Status: dag.WorkflowAccepted, Generation: 1, CreatedAt: t0, UpdatedAt: *sec(40),
				LastSeq: 1, EventIDs: []string{"ev-1"}, FormulaCount: 2, NodeCount: 5}},
		{name: "a transition ahead", before: running, ev: stored(8, 9), w: events.WorkflowEvent{Ref: ref, Status: dag.WorkflowSucceeded, Run: events.Run{EndedAt: sec(9)}},
			want: &events.WorkflowDoc{WorkflowID: "w1", Workflow: "web", Operation: dag.OpCreate, Status: dag.WorkflowSucceeded, Generation: 1, CreatedAt: t0, UpdatedAt: *sec(9),
				LastSeq: 8, EventIDs: []string{"ev-1", "ev-5", "ev-8"}, EndedAt: sec(9)}},
		{name: "a control request is recorded", before: running, ev: stored(8, 9), w: events.WorkflowEvent{Ref: ref, Status: dag.WorkflowPaused, Reason: "wait", RequestedBy: alice},
			want: &events.WorkflowDoc{WorkflowID: "w1", Workflow: "web", Operation: dag.OpCreate, Status: dag.WorkflowPaused, Generation: 1, CreatedAt: t0, UpdatedAt: *sec(9),
				LastSeq: 8, EventIDs: []string{"ev-1", "ev-5", "ev-8"}, Requests: []events.Request{{Status: dag.WorkflowPaused, Reason: "wait", By: *alice, At: *sec(9)}}}},
		{name: "stream sequence applied already", before: running, ev: stored(5, 9), w: events.WorkflowEvent{Ref: ref, Status: dag.WorkflowSucceeded}},
		{name: "a copy stored again (its id seen)", before: running, ev: &consume.Event{Envelope: &events.Envelope{ID: "ev-5", Time: *sec(9)}, Stream: 12},
			w: events.WorkflowEvent{Ref: ref, Status: dag.WorkflowSucceeded}},
		{name: "a late running after the end", before: succeeded, ev: stored(10, 10), w: events.WorkflowEvent{Ref: ref, Status: dag.WorkflowRunning}},
		{name: "an earlier generation", before: func() *events.WorkflowDoc { d := running(); d.Generation = 2; return d }, ev: stored(10, 10),
			w: events.WorkflowEvent{Ref: ref, Status: dag.WorkflowFailed}},
		{name: "a retry's generation after the end", before: succeeded, ev: stored(10, 10), w: events.WorkflowEvent{Ref: refGen(2), Status: dag.WorkflowRunning},
			want: &events.WorkflowDoc{WorkflowID: "w1", Workflow: "web", Operation: dag.OpCreate, Status: dag.WorkflowRunning, Generation: 2, CreatedAt: t0, UpdatedAt: *sec(10),
				LastSeq: 10, EventIDs: []string{"ev-1", "ev-5", "ev-10"}}},
	} {
		doc := c.before()
		changed := foldWorkflow(doc, c.ev, &c.w)
		folded(t, c.name, doc, changed, c.want, c.before)
	}
}

// The ids kept to tell a copy are bounded.
func TestFoldWorkflowKeepsTheLastEventIDs(t *testing.T) {
	doc := newWorkflowDoc(stored(1, 0), ref)
	for seq := uint64(1); seq <= events.MaxWorkflowEventIDs+5; seq++ {
		foldWorkflow(doc, stored(seq, 1), &events.WorkflowEvent{Ref: ref, Status: dag.WorkflowRunning})
	}
	if n := len(doc.EventIDs); n != events.MaxWorkflowEventIDs || doc.EventIDs[n-1] != fmt.Sprintf("ev-%d", events.MaxWorkflowEventIDs+5) {
		t.Fatalf("%d ids kept, the last %q; want the last %d", n, doc.EventIDs[n-1], events.MaxWorkflowEventIDs)
	}
}

func TestFoldFormula(t *testing.T) {
	none := func() *events.FormulaDoc { return nil }
	running := func() *events.FormulaDoc {
		return &events.FormulaDoc{Host: "h1", Status: dag.FormulaRunning, Generation: 1, LastSeq: 4, StartedAt: sec(2)}
	}
	for _, c := range []struct {
		name   string
		before func() *events.FormulaDoc
		ev     *consume.Event
		e      events.FormulaEvent
		want   *events.FormulaDoc
	}{
		{name: "the first event starts the document", before: none, ev: stored(2, 1), e: events.FormulaEvent{Ref: ref, Status: dag.FormulaReady},
			want: &events.FormulaDoc{Host: "h1", Status: dag.FormulaReady, Generation: 1, LastSeq: 2}},
		{name: "running keeps its start", before: none, ev: stored(3, 2), e: events.FormulaEvent{Ref: ref, Status: dag.FormulaRunning, Run: events.Run{StartedAt: sec(2)}},
			want: &events.FormulaDoc{Host: "h1", Status: dag.FormulaRunning, Generation: 1, LastSeq: 3, StartedAt: sec(2)}},
		{name: "an end keeps the start and adds the end", before: running, ev: stored(9, 8), e: events.FormulaEvent{Ref: ref, Status: dag.FormulaFailed, Run: events.Run{EndedAt: sec(8), Error: "boom"}},
			want: &events.FormulaDoc{Host: "h1", Status: dag.FormulaFailed, Generation: 1, LastSeq: 9, StartedAt: sec(2), EndedAt: sec(8), Error: "boom"}},
		{name: "ready stored after an executor took it", before: running, ev: stored(9, 8), e: events.FormulaEvent{Ref: ref, Status: dag.FormulaReady}},
		{name: "stream sequence applied already", before: running, ev: stored(4, 8), e: events.FormulaEvent{Ref: ref, Status: dag.FormulaSucceeded}},
		{name: "an older generation", before: func() *events.FormulaDoc { f := running(); f.Generation = 2; return f }, ev: stored(9, 8),
			e: events.FormulaEvent{Ref: ref, Status: dag.FormulaSucceeded}},
	} {
		f, changed := foldFormula(c.before(), c.ev, &c.e)
		folded(t, c.name, f, changed, c.want, c.before)
	}
}

func TestFoldHealth(t *testing.T) {
	running := func() *events.FormulaDoc {
		return &events.FormulaDoc{Host: "h1", Status: dag.FormulaRunning, Generation: 1, LastSeq: 4}
	}
	h := events.HealthEvent{Ref: ref, Status: events.HealthStatus("passed"), Run: events.Run{Attempt: 2}, Final: true, OutputTail: "ok"}
	f, changed := foldHealth(running(), stored(6, 5), &h)
	folded(t, "a check", f, changed, &events.FormulaDoc{Host: "h1", Status: dag.FormulaRunning, Generation: 1, LastSeq: 6,
		Health: &events.HealthDoc{Status: "passed", Attempts: 2, Final: true, Output: "ok"}}, running)
	f, changed = foldHealth(running(), stored(4, 5), &h)
	folded(t, "applied already", f, changed, nil, running)
	f, changed = foldHealth(nil, stored(6, 5), &h)
	folded(t, "before the formula's first event", f, changed, &events.FormulaDoc{Host: "h1", Status: dag.FormulaPending, Generation: 1, LastSeq: 6,
		Health: &events.HealthDoc{Status: "passed", Attempts: 2, Final: true, Output: "ok"}}, nil)
}

func TestFoldNode(t *testing.T) {
	none := func() *events.NodeDoc { return nil }
	mark := func(gen, attempt int, st dag.NodeState) *dag.NodeMark {
		return &dag.NodeMark{Generation: gen, Attempt: attempt, State: st}
	}
	running := func() *events.NodeDoc {
		return &events.NodeDoc{Status: dag.NodeRunning, Operation: dag.OpCreate, Attempts: 1, LastAttempt: 1, StartedAt: sec(1), Transitions: 1, Generation: 1, LastSeq: 3,
			Progress: 40, SpecHash: "s1", Mark: mark(1, 1, dag.NodeRunning)}
	}
	failed := func() *events.NodeDoc {
		n := running()
		n.Status, n.ExitCode, n.Error, n.EndedAt, n.Transitions, n.LastSeq, n.Mark = dag.NodeFailed, code(2), "exit 2", sec(4), 2, 5, mark(1, 1, dag.NodeFailed)
		return n
	}
	node := func(attempt int, st dag.NodeState, run events.Run) events.NodeEvent {
		run.Attempt = attempt
		return events.NodeEvent{Ref: ref, Status: st, Run: run, SpecHash: "s1"}
	}
	for _, c := range []struct {
		name   string
		before func() *events.NodeDoc
		ev     *consume.Event
		e      events.NodeEvent
		want   *events.NodeDoc
	}{
		{name: "the first attempt starts", before: none, ev: stored(3, 1), e: node(1, dag.NodeRunning, events.Run{StartedAt: sec(1)}),
			want: &events.NodeDoc{Status: dag.NodeRunning, Operation: dag.OpCreate, Attempts: 1, LastAttempt: 1, StartedAt: sec(1), Transitions: 1, Generation: 1, LastSeq: 3,
				SpecHash: "s1", Mark: mark(1, 1, dag.NodeRunning)}},
		{name: "the attempt fails", before: running, ev: stored(5, 4), e: node(1, dag.NodeFailed, events.Run{EndedAt: sec(4), ExitCode: code(2), Error: "exit 2"}),
			want: failed()},
		{name: "announced again: not counted again", before: running, ev: stored(4, 2), e: node(1, dag.NodeRunning, events.Run{}),
			want: func() *events.NodeDoc { n := running(); n.LastSeq = 4; return n }()},
		{name: "a failure with a retry to follow is still at work", before: running, ev: stored(5, 4),
			e: func() events.NodeEvent {
				e := node(1, dag.NodeFailed, events.Run{EndedAt: sec(4), ExitCode: code(1)})
				e.WillRetry = true
				return e
			}(),
			want: func() *events.NodeDoc {
				n := running()
				n.ExitCode, n.EndedAt, n.Transitions, n.LastSeq = code(1), sec(4), 2, 5
				n.Mark = &dag.NodeMark{Generation: 1, Attempt: 1, State: dag.NodeFailed, WillRetry: true}
				return n
			}()},
		{name: "a new attempt starts afresh", before: failed, ev: stored(7, 6), e: node(2, dag.NodeRunning, events.Run{StartedAt: sec(6)}),
			want: &events.NodeDoc{Status: dag.NodeRunning, Operation: dag.OpCreate, Attempts: 2, LastAttempt: 2, StartedAt: sec(6), Transitions: 3, Generation: 1, LastSeq: 7,
				SpecHash: "s1", Mark: mark(1, 2, dag.NodeRunning)}},
		{name: "a running stored after the attempt's end", before: failed, ev: stored(6, 6), e: node(1, dag.NodeRunning, events.Run{})},
		{name: "stream sequence applied already", before: running, ev: stored(3, 6), e: node(1, dag.NodeSucceeded, events.Run{})},
	} {
		n, changed := foldNode(c.before(), c.ev, &c.e)
		folded(t, c.name, n, changed, c.want, c.before)
	}
}

func TestFoldProgress(t *testing.T) {
	running := func() *events.NodeDoc {
		return &events.NodeDoc{Status: dag.NodeRunning, Attempts: 2, LastAttempt: 2, Generation: 1, LastSeq: 3, Mark: &dag.NodeMark{Generation: 1, Attempt: 2, State: dag.NodeRunning}}
	}
	ended := func() *events.NodeDoc {
		n := running()
		n.Status, n.Mark = dag.NodeSucceeded, &dag.NodeMark{Generation: 1, Attempt: 2, State: dag.NodeSucceeded}
		return n
	}
	for _, c := range []struct {
		name    string
		before  func() *events.NodeDoc
		seq     uint64
		gen, at int
		want    *events.NodeDoc
	}{
		{name: "of the attempt running", before: running, seq: 4, gen: 1, at: 2,
			want: func() *events.NodeDoc { n := running(); n.LastSeq, n.Progress = 4, 60; return n }()},
		{name: "of an earlier attempt", before: running, seq: 4, gen: 1, at: 1},
		{name: "of an earlier generation", before: running, seq: 4, gen: 0, at: 2},
		{name: "stored after the attempt's end", before: ended, seq: 4, gen: 1, at: 2},
		{name: "applied already", before: running, seq: 3, gen: 1, at: 2},
		{name: "before the node's running", before: func() *events.NodeDoc { return nil }, seq: 4, gen: 1, at: 2},
	} {
		n := c.before()
		changed := foldProgress(n, stored(c.seq, 5), &events.ProgressEvent{Ref: refGen(c.gen), Attempt: c.at, Percent: 60})
		if n == nil {
			if changed {
				t.Errorf("%s: changed a document that is not there", c.name)
			}
			continue
		}
		folded(t, c.name, n, changed, c.want, c.before)
	}
}

func TestFoldHostNode(t *testing.T) {
	none := func() *events.HostNode { return nil }
	entry := func(seq uint64, s int, st dag.NodeState, op dag.Operation) events.HostLogEntry {
		return events.HostLogEntry{Time: *sec(s), WorkflowID: "w1", Operation: op, Status: st, Attempt: 1, Generation: 1}
	}
	running := func() *events.HostNode {
		return &events.HostNode{Host: "h1", Workflow: "web", Formula: "f", Node: "n", Status: dag.NodeRunning, Operation: dag.OpCreate, SpecHash: "s1", WorkflowID: "w1",
			StartedAt: sec(1), Actor: "x1", LastSeq: 3, Log: []events.HostLogEntry{entry(3, 1, dag.NodeRunning, dag.OpCreate)}}
	}
	created := func() *events.HostNode {
		hn := running()
		hn.Status, hn.EndedAt, hn.LastSeq = dag.NodeSucceeded, sec(4), 5
		hn.InPlace = &events.InPlace{Status: dag.NodeSucceeded, SpecHash: "s1", WorkflowID: "w1", EndedAt: sec(4)}
		hn.Log = append(hn.Log, entry(5, 4, dag.NodeSucceeded, dag.OpCreate))
		return hn
	}
	ev := func(op dag.Operation, st dag.NodeState, run events.Run) events.NodeEvent {
		r := ref
		r.Operation, run.Attempt = op, 1
		if op != dag.OpCreate { // another workflow's run of the node
			r.WorkflowID = "w2"
		}
		return events.NodeEvent{Ref: r, Status: st, Run: run, SpecHash: "s1", Actor: "x1"}
	}
	of := func(e events.HostLogEntry, id string) events.HostLogEntry { e.WorkflowID = id; return e }
	for _, c := range []struct {
		name   string
		before func() *events.HostNode
		ev     *consume.Event
		e      events.NodeEvent
		want   *events.HostNode
	}{
		{name: "the first transition starts the record", before: none, ev: stored(3, 1), e: ev(dag.OpCreate, dag.NodeRunning, events.Run{StartedAt: sec(1)}), want: running()},
		{name: "a create that completed is in place", before: running, ev: stored(5, 4), e: ev(dag.OpCreate, dag.NodeSucceeded, events.Run{EndedAt: sec(4)}), want: created()},
		{name: "a delete removes what is in place", before: created, ev: stored(7, 6), e: ev(dag.OpDelete, dag.NodeSucceeded, events.Run{EndedAt: sec(6)}),
			want: func() *events.HostNode {
				hn := created()
				hn.Operation, hn.WorkflowID, hn.EndedAt, hn.LastSeq, hn.InPlace = dag.OpDelete, "w2", sec(6), 7, nil
				hn.Log = append(hn.Log, of(entry(7, 6, dag.NodeSucceeded, dag.OpDelete), "w2"))
				return hn
			}()},
		{name: "a check is kept apart", before: created, ev: stored(7, 6), e: func() events.NodeEvent {
			e := ev(dag.OpCheck, dag.NodeSucceeded, events.Run{EndedAt: sec(6)})
			e.Check = events.CheckWouldChange
			return e
		}(),
			want: func() *events.HostNode {
				hn := created()
				hn.LastSeq = 7
				hn.Check = &events.HostCheck{Status: dag.NodeSucceeded, Result: events.CheckWouldChange, SpecHash: "s1", WorkflowID: "w2", EndedAt: sec(6)}
				hn.Log = append(hn.Log, of(entry(7, 6, dag.NodeSucceeded, dag.OpCheck), "w2"))
				return hn
			}()},
		{name: "a check that failed has no verdict", before: created, ev: stored(7, 6), e: func() events.NodeEvent {
			e := ev(dag.OpCheck, dag.NodeFailed, events.Run{EndedAt: sec(6), Error: "no ssh"})
			e.Check = events.CheckWouldChange
			return e
		}(),
			want: func() *events.HostNode {
				hn := created()
				hn.LastSeq = 7
				hn.Check = &events.HostCheck{Status: dag.NodeFailed, SpecHash: "s1", WorkflowID: "w2", EndedAt: sec(6), Error: "no ssh"}
				e := of(entry(7, 6, dag.NodeFailed, dag.OpCheck), "w2")
				e.Error = "no ssh"
				hn.Log = append(hn.Log, e)
				return hn
			}()},
		{name: "blocked before it ran: its own times, nothing removed", before: created, ev: stored(7, 6),
			e: func() events.NodeEvent {
				e := ev(dag.OpCreate, dag.NodeBlocked, events.Run{EndedAt: sec(6)})
				e.Generation, e.Blocker, e.Actor = 2, "m", ""
				return e
			}(),
			want: func() *events.HostNode {
				hn := created()
				hn.Status, hn.Blocker, hn.Actor, hn.StartedAt, hn.EndedAt, hn.LastSeq = dag.NodeBlocked, "m", "", nil, sec(6), 7
				e := entry(7, 6, dag.NodeBlocked, dag.OpCreate)
				e.Generation = 2
				hn.Log = append(hn.Log, e)
				return hn
			}()},
		{name: "an attempt that waits for a slot has touched nothing: still in place", before: created, ev: stored(7, 6),
			e: func() events.NodeEvent {
				e := ev(dag.OpCreate, dag.NodeRunning, events.Run{})
				e.Generation, e.NotStarted = 2, true
				return e
			}(),
			want: func() *events.HostNode {
				hn := created()
				hn.Status, hn.StartedAt, hn.EndedAt, hn.LastSeq = dag.NodeRunning, nil, nil, 7
				e := entry(7, 6, dag.NodeRunning, dag.OpCreate)
				e.Generation = 2
				hn.Log = append(hn.Log, e)
				return hn
			}()},
		{name: "an attempt that started nothing and failed (no connection): still in place", before: created, ev: stored(7, 6),
			e: func() events.NodeEvent {
				e := ev(dag.OpCreate, dag.NodeFailed, events.Run{EndedAt: sec(6), Error: "no ssh"})
				e.Generation, e.NotStarted = 2, true
				return e
			}(),
			want: func() *events.HostNode {
				hn := created()
				hn.Status, hn.EndedAt, hn.LastSeq = dag.NodeFailed, sec(6), 7
				e := entry(7, 6, dag.NodeFailed, dag.OpCreate)
				e.Generation, e.Error = 2, "no ssh"
				hn.Log = append(hn.Log, e)
				return hn
			}()},
		{name: "an attempt that started runs it again: no longer in place", before: created, ev: stored(7, 6),
			e: func() events.NodeEvent {
				e := ev(dag.OpCreate, dag.NodeRunning, events.Run{StartedAt: sec(6)})
				e.Generation = 2
				return e
			}(),
			want: func() *events.HostNode {
				hn := created()
				hn.Status, hn.StartedAt, hn.EndedAt, hn.LastSeq, hn.InPlace = dag.NodeRunning, sec(6), nil, 7, nil
				e := entry(7, 6, dag.NodeRunning, dag.OpCreate)
				e.Generation = 2
				hn.Log = append(hn.Log, e)
				return hn
			}()},
		{name: "the same transition stored again", before: created, ev: stored(6, 4), e: ev(dag.OpCreate, dag.NodeSucceeded, events.Run{EndedAt: sec(4)}),
			want: func() *events.HostNode { hn := created(); hn.LastSeq = 6; return hn }()},
		{name: "a running stored after the end", before: created, ev: stored(6, 4), e: ev(dag.OpCreate, dag.NodeRunning, events.Run{})},
		{name: "applied already", before: created, ev: stored(5, 4), e: ev(dag.OpCreate, dag.NodeFailed, events.Run{})},
		{name: "another host's record under the same token", before: func() *events.HostNode { hn := created(); hn.Host = "h_1"; return hn }, ev: stored(3, 1),
			e: ev(dag.OpCreate, dag.NodeRunning, events.Run{StartedAt: sec(1)}), want: running()},
	} {
		hn, changed := foldHostNode(c.before(), c.ev, &c.e)
		folded(t, c.name, hn, changed, c.want, c.before)
	}
}

func TestNodeEventsAgainstTheirFormula(t *testing.T) {
	for _, c := range []struct {
		name              string
		f                 *events.FormulaDoc
		r                 events.Ref
		otherHost, isLate bool
	}{
		{"no formula yet", nil, ref, false, false},
		{"its formula's host", &events.FormulaDoc{Host: "h1", Generation: 1}, ref, false, false},
		{"another host than its formula's", &events.FormulaDoc{Host: "h2", Generation: 1}, ref, true, false},
		{"a formula of no host recorded", &events.FormulaDoc{Generation: 1}, ref, false, false},
		{"an older generation than its formula's", &events.FormulaDoc{Host: "h1", Generation: 2}, ref, false, true},
		{"a newer generation", &events.FormulaDoc{Host: "h1", Generation: 1}, refGen(2), false, false},
	} {
		if got := onOtherHost(c.f, c.r); got != c.otherHost {
			t.Errorf("%s: onOtherHost = %v", c.name, got)
		}
		if got := lateForFormula(c.f, &events.NodeEvent{Ref: c.r}); got != c.isLate {
			t.Errorf("%s: lateForFormula = %v", c.name, got)
		}
	}
}
