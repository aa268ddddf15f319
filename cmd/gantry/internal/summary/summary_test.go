package summary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// stream records a workflow's events as the services publish them, in
// stream order.
type stream struct {
	t    *testing.T
	id   string
	envs []*events.Envelope
}

func newStream(t *testing.T) *stream { return &stream{t: t, id: "w1"} }

func (s *stream) ref(gen int, formula, host, node string) events.Ref {
	return events.Ref{WorkflowID: s.id, Workflow: "w", Formula: formula, Host: host, Node: node, Operation: dag.OpCreate, Generation: gen}
}

func (s *stream) add(p events.Payload) *stream {
	s.t.Helper()
	env, err := events.NewAt(fmt.Sprintf("ev-%d", len(s.envs)+1), "test", time.Now(), p)
	if err != nil {
		s.t.Fatal(err)
	}
	s.envs = append(s.envs, env)
	return s
}

func (s *stream) workflow(gen int, st dag.WorkflowState, total int) *stream {
	return s.add(&events.WorkflowEvent{Ref: s.ref(gen, "", "", ""), Status: st, TotalNodes: total})
}

func (s *stream) formula(gen int, id, host string, st dag.FormulaState, why string) *stream {
	return s.add(&events.FormulaEvent{Ref: s.ref(gen, id, host, ""), Status: st, Run: events.Run{Error: why}})
}

// node is a node's transition; attempt 0 for one that never ran
// (blocked, cancelled, already done).
func (s *stream) node(gen int, formula, host, name string, attempt int, st dag.NodeState, why string) *stream {
	return s.add(&events.NodeEvent{Ref: s.ref(gen, formula, host, name), Status: st, Run: events.Run{Attempt: attempt, Error: why}})
}

// ran is a node's running then its end, in attempt 1.
func (s *stream) ran(gen int, formula, host, name string, end dag.NodeState, why string) *stream {
	return s.node(gen, formula, host, name, 1, dag.NodeRunning, "").node(gen, formula, host, name, 1, end, why)
}

func (s *stream) check(gen int, formula, host string, attempt, retries int, final bool, output string, exit int) *stream {
	e := &events.HealthEvent{Ref: s.ref(gen, formula, host, ""), Status: events.HealthFail, Final: final, Retries: retries, OutputTail: output,
		Run: events.Run{Attempt: attempt, ExitCode: &exit, Error: fmt.Sprintf("exit status %d", exit)}}
	if final {
		e.Error = fmt.Sprintf("failed %d of %d checks; last: exit status %d", attempt, retries, exit)
	}
	return s.add(e)
}

func (s *stream) summary() Summary {
	var t Tally
	for _, env := range s.envs {
		t.Observe(env)
	}
	return t.Summary()
}

// The summary counts each node by its last transition across every run
// of the workflow, counts a formula that failed without a failed node
// (its health gate) as a failure, and names every failure.
func TestSummaryOfRecordedStreams(t *testing.T) {
	t.Parallel()
	web := func(s *stream, gen int, host string) *stream {
		f := "app-" + host
		return s.formula(gen, f, host, dag.FormulaRunning, "").ran(gen, f, host, "install", dag.NodeSucceeded, "").
			ran(gen, f, host, "config", dag.NodeSucceeded, "").ran(gen, f, host, "start", dag.NodeSucceeded, "").formula(gen, f, host, dag.FormulaSucceeded, "")
	}
	cases := []struct {
		name       string
		stream     func(s *stream) *stream
		want       string
		wantFailed string
	}{{
		name: "first run, all done",
		stream: func(s *stream) *stream {
			s.workflow(1, dag.WorkflowAccepted, 9).workflow(1, dag.WorkflowRunning, 0)
			for _, h := range []string{"web-1", "web-2", "web-3"} {
				web(s, 1, h)
			}
			return s.workflow(1, dag.WorkflowSucceeded, 0)
		},
		want: "9/9 nodes done, 0 running, 0 failed",
	}, {
		// gantry retry ID --node app-web-2/config: the retry runs that
		// node (and the held ones say they are as they were); the
		// formulas that succeeded have no event in run 2.
		name: "retry of one node",
		stream: func(s *stream) *stream {
			s.workflow(1, dag.WorkflowAccepted, 9).workflow(1, dag.WorkflowRunning, 0)
			web(s, 1, "web-1")
			s.formula(1, "app-web-2", "web-2", dag.FormulaRunning, "").ran(1, "app-web-2", "web-2", "install", dag.NodeSucceeded, "").
				ran(1, "app-web-2", "web-2", "config", dag.NodeFailed, "exit status 2").node(1, "app-web-2", "web-2", "start", 0, dag.NodeBlocked, "").
				formula(1, "app-web-2", "web-2", dag.FormulaFailed, "node(s) failed: config")
			web(s, 1, "web-3")
			s.workflow(1, dag.WorkflowFailed, 0)
			s.workflow(2, dag.WorkflowRunning, 0).formula(2, "app-web-2", "web-2", dag.FormulaRunning, "").
				node(2, "app-web-2", "web-2", "install", 1, dag.NodeSucceeded, "").
				node(2, "app-web-2", "web-2", "config", 2, dag.NodeRunning, "").node(2, "app-web-2", "web-2", "config", 2, dag.NodeSucceeded, "").
				node(2, "app-web-2", "web-2", "start", 2, dag.NodeRunning, "").node(2, "app-web-2", "web-2", "start", 2, dag.NodeSucceeded, "").
				formula(2, "app-web-2", "web-2", dag.FormulaSucceeded, "")
			return s.workflow(2, dag.WorkflowSucceeded, 0)
		},
		want: "9/9 nodes done, 0 running, 0 failed (run 2: 3/3 of its nodes done)",
	}, {
		name: "retry still running",
		stream: func(s *stream) *stream {
			s.workflow(1, dag.WorkflowAccepted, 3).formula(1, "a", "h", dag.FormulaRunning, "").
				ran(1, "a", "h", "x", dag.NodeSucceeded, "").ran(1, "a", "h", "y", dag.NodeFailed, "exit status 1").node(1, "a", "h", "z", 0, dag.NodeCancelled, "").
				formula(1, "a", "h", dag.FormulaFailed, "node(s) failed: y").workflow(1, dag.WorkflowFailed, 0)
			return s.workflow(2, dag.WorkflowRunning, 0).formula(2, "a", "h", dag.FormulaRunning, "").node(2, "a", "h", "y", 2, dag.NodeRunning, "")
		},
		want: "2/3 nodes done, 1 running, 0 failed, 1 cancelled (run 2: 0/1 of its nodes done)",
	}, {
		name: "health gate failed",
		stream: func(s *stream) *stream {
			s.workflow(1, dag.WorkflowAccepted, 3).formula(1, "db", "h1", dag.FormulaRunning, "").ran(1, "db", "h1", "install", dag.NodeSucceeded, "").
				ran(1, "db", "h1", "start", dag.NodeSucceeded, "").formula(1, "db", "h1", dag.FormulaSucceeded, "").formula(1, "db", "h1", dag.FormulaGating, "")
			s.check(1, "db", "h1", 1, 3, false, "pg_isready: no response\n", 2).check(1, "db", "h1", 2, 3, false, "pg_isready: no response\n", 2).
				check(1, "db", "h1", 3, 3, true, "starting\npg_isready: no response\n", 2)
			return s.formula(1, "db", "h1", dag.FormulaUnhealthy, "").node(1, "app", "h2", "run", 0, dag.NodeBlocked, "").
				formula(1, "app", "h2", dag.FormulaBlocked, "").workflow(1, dag.WorkflowFailed, 0)
		},
		want:       "3/3 nodes done, 0 running, 1 failed, 1 blocked",
		wantFailed: "failed: db (health gate failed after 3 checks: pg_isready: no response)",
	}, {
		// batch 1 (web-1) failed its gate, max_failed 1: batch 2 runs.
		name: "rollout mid-batch",
		stream: func(s *stream) *stream {
			s.workflow(1, dag.WorkflowAccepted, 3).add(&events.RolloutEvent{Ref: s.ref(1, "app", "", ""), Status: events.RolloutBatchStarted, Batch: 1, Batches: 3, Instances: []string{"app-web-1"}, MaxFailed: 1})
			s.formula(1, "app-web-1", "web-1", dag.FormulaRunning, "").ran(1, "app-web-1", "web-1", "conf", dag.NodeSucceeded, "").
				formula(1, "app-web-1", "web-1", dag.FormulaSucceeded, "").formula(1, "app-web-1", "web-1", dag.FormulaGating, "").
				check(1, "app-web-1", "web-1", 1, 1, true, "curl: (7) Failed to connect\n", 7).formula(1, "app-web-1", "web-1", dag.FormulaUnhealthy, "")
			s.add(&events.RolloutEvent{Ref: s.ref(1, "app", "", ""), Status: events.RolloutBatchFinished, Batch: 1, Batches: 3, Instances: []string{"app-web-1"}, Failed: 1, MaxFailed: 1})
			s.add(&events.RolloutEvent{Ref: s.ref(1, "app", "", ""), Status: events.RolloutBatchStarted, Batch: 2, Batches: 3, Instances: []string{"app-web-2"}, MaxFailed: 1})
			return s.formula(1, "app-web-2", "web-2", dag.FormulaRunning, "").node(1, "app-web-2", "web-2", "conf", 1, dag.NodeRunning, "")
		},
		want:       "1/3 nodes done, 1 running, 1 failed",
		wantFailed: "failed: app-web-1 (health gate failed after 1 check: curl: (7) Failed to connect)",
	}, {
		name: "several failed formulas",
		stream: func(s *stream) *stream {
			s.workflow(1, dag.WorkflowAccepted, 4)
			for _, f := range []string{"a", "b", "c"} {
				s.formula(1, f, "h", dag.FormulaRunning, "").ran(1, f, "h", "n", dag.NodeFailed, "exit status 3\nmore").formula(1, f, "h", dag.FormulaFailed, "node(s) failed: n")
			}
			return s.node(1, "d", "h", "n", 0, dag.NodeBlocked, "").formula(1, "d", "h", dag.FormulaBlocked, "").workflow(1, dag.WorkflowFailed, 0)
		},
		want:       "4/4 nodes done, 0 running, 3 failed, 1 blocked",
		wantFailed: "failed: a/n (exit status 3), b/n (exit status 3), c/n (exit status 3)",
	}, {
		name: "more failures than are named",
		stream: func(s *stream) *stream {
			s.workflow(1, dag.WorkflowAccepted, 7)
			for i := range 7 {
				f := fmt.Sprintf("f%d", i)
				s.formula(1, f, "h", dag.FormulaRunning, "").ran(1, f, "h", "n", dag.NodeFailed, "").formula(1, f, "h", dag.FormulaFailed, "")
			}
			return s.workflow(1, dag.WorkflowFailed, 0)
		},
		want:       "7/7 nodes done, 0 running, 7 failed",
		wantFailed: "failed: 7, among them f0/n, f1/n, f2/n, f3/n, f4/n and 2 more (gantry status w1 lists them all)",
	}, {
		name: "a deadline fails a formula whose node was cancelled",
		stream: func(s *stream) *stream {
			return s.workflow(1, dag.WorkflowAccepted, 1).formula(1, "slow", "h", dag.FormulaRunning, "").
				node(1, "slow", "h", "sleep", 1, dag.NodeRunning, "").node(1, "slow", "h", "sleep", 1, dag.NodeCancelled, "").
				formula(1, "slow", "h", dag.FormulaFailed, "deadline: formula slow's timeout of 3s passed with 1 node(s) unfinished (sleep)")
		},
		want:       "1/1 nodes done, 0 running, 1 failed, 1 cancelled",
		wantFailed: "failed: slow (deadline: formula slow's timeout of 3s passed with 1 node(s) unfinished (sleep))",
	}, {
		name: "a failure that retries is running",
		stream: func(s *stream) *stream {
			s.workflow(1, dag.WorkflowAccepted, 2).node(1, "f", "h", "a", 1, dag.NodeRunning, "")
			s.add(&events.NodeEvent{Ref: s.ref(1, "f", "h", "a"), Status: dag.NodeFailed, WillRetry: true, Run: events.Run{Attempt: 1, Error: "exit status 1"}})
			return s
		},
		want: "0/2 nodes done, 1 running, 0 failed",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.stream(newStream(t)).summary()
			if got.String() != c.want {
				t.Errorf("summary %q, want %q", got.String(), c.want)
			}
			if fl := got.FailedLine("w1"); fl != c.wantFailed {
				t.Errorf("failed line %q, want %q", fl, c.wantFailed)
			}
			if got.Failed != len(got.Failures) {
				t.Errorf("failed %d, but %d failures", got.Failed, len(got.Failures))
			}
		})
	}
}

// An event stored again counts once, and a transition behind the node's
// last one (a running stored after its succeeded) changes nothing.
func TestSummaryIgnoresRepeatsAndStaleEvents(t *testing.T) {
	t.Parallel()
	s := newStream(t).workflow(1, dag.WorkflowAccepted, 2).ran(1, "f", "h", "a", dag.NodeSucceeded, "").ran(1, "f", "h", "b", dag.NodeSucceeded, "")
	var tl Tally
	for _, env := range s.envs {
		tl.Observe(env)
	}
	if !tl.Observe(s.envs[1]) {
		t.Error("an event stored again is taken for a new one")
	}
	s.node(1, "f", "h", "a", 1, dag.NodeRunning, "")
	tl.Observe(s.envs[len(s.envs)-1])
	if got := tl.Summary().String(); got != "2/2 nodes done, 0 running, 0 failed" {
		t.Errorf("%q", got)
	}
}

// An event of another type with the id of one taken in is not a repeat:
// a health event (which a health-gate may publish) carrying the id of a
// workflow's end does not hide the end (Admit binds a type to where it
// comes from, not an id).
func TestSummaryRepeatIsByTypeAndID(t *testing.T) {
	t.Parallel()
	s := newStream(t).workflow(1, dag.WorkflowAccepted, 1).check(1, "f", "h", 1, 1, true, "ok", 0).workflow(1, dag.WorkflowSucceeded, 1)
	health, end := s.envs[1], s.envs[2]
	end.ID = health.ID // the forger's id, taken in first
	var tl Tally
	tl.Observe(s.envs[0])
	tl.Observe(health)
	if tl.Observe(end) {
		t.Fatal("the workflow's end is taken for a repeat of a health event that carried its id")
	}
}

// A summary started from the state-store's document goes on with the
// events that follow; FromDoc is what gantry status shows.
func TestSummaryFromDoc(t *testing.T) {
	t.Parallel()
	exit := 2
	doc := &events.WorkflowDoc{WorkflowID: "w1", Generation: 1, NodeCount: 3, Status: dag.WorkflowRunning, Formulas: map[string]*events.FormulaDoc{
		"db": {Generation: 1, Host: "h1", Status: dag.FormulaUnhealthy, Health: &events.HealthDoc{Status: events.HealthFail, Final: true, Attempts: 3,
			Output: "pg_isready: no response\n", Error: "failed 3 of 3 checks; last: exit status 2", ExitCode: &exit},
			Nodes: map[string]*events.NodeDoc{"install": {Status: dag.NodeSucceeded, Generation: 1, LastAttempt: 1}}},
		"app": {Generation: 1, Host: "h2", Status: dag.FormulaRunning, Nodes: map[string]*events.NodeDoc{
			"a": {Status: dag.NodeRunning, Generation: 1, LastAttempt: 1}}},
	}}
	got := FromDoc(doc)
	if got.String() != "1/3 nodes done, 1 running, 1 failed" || got.FailedLine("w1") != "failed: db (health gate failed after 3 checks: pg_isready: no response)" {
		t.Fatalf("from the document: %q; %q", got, got.FailedLine("w1"))
	}
	var tl Tally
	tl.Seed(doc)
	s := newStream(t)
	s.node(1, "app", "h2", "a", 1, dag.NodeSucceeded, "").ran(1, "app", "h2", "b", dag.NodeFailed, "exit status 1")
	for _, env := range s.envs {
		tl.Observe(env)
	}
	got = tl.Summary()
	if want := "3/3 nodes done, 0 running, 2 failed"; got.String() != want || !strings.Contains(got.FailedLine("w1"), "app/b (exit status 1)") {
		t.Fatalf("after the events: %q, %q; want %q", got, got.FailedLine("w1"), want)
	}
}

// A transition's reason and error are said once.
func TestSaid(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ state, reason, err, want string }{
		{"cancelled", "cancelled by operator: killed on the host", "", "cancelled by operator: killed on the host"},
		{"cancelled", "cancelled: killed on the host", "cancelled: context canceled", "cancelled: killed on the host"},
		{"skipped", "check passed", "", "skipped: check passed"},
		{"failed", "", "exit status 2\nmore", "failed: exit status 2"},
		{"failed", "on_failure stop", "exit status 2", "failed: on_failure stop: exit status 2"},
		{"failed", "", "", "failed"},
		{"failed", "exit status 2 after 3 attempts", "exit status 2", "failed: exit status 2 after 3 attempts"},
	} {
		if got := Said(c.state, c.reason, c.err); got != c.want {
			t.Errorf("Said(%q, %q, %q) = %q, want %q", c.state, c.reason, c.err, got, c.want)
		}
	}
}
