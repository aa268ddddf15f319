package dag_test

import (
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// orders reads a grid of expected orders: a row per state held, a column
// per state that comes; < Behind, = Same, ~ Other, > Ahead.
func orders(t *testing.T, n int, grid string) [][]dag.Order {
	t.Helper()
	sym := map[string]dag.Order{"<": dag.Behind, "=": dag.Same, "~": dag.Other, ">": dag.Ahead}
	var out [][]dag.Order
	for _, line := range strings.Split(strings.TrimSpace(grid), "\n") {
		fields := strings.Fields(line)
		row := make([]dag.Order, 0, n)
		for _, f := range fields[len(fields)-n:] {
			o, ok := sym[f]
			if !ok {
				t.Fatalf("grid symbol %q", f)
			}
			row = append(row, o)
		}
		out = append(out, row)
	}
	if len(out) != n {
		t.Fatalf("grid has %d rows, want %d", len(out), n)
	}
	return out
}

// Within one attempt of one generation, every pair of node states: the
// steps go pending, running, failed with a retry to follow, an end; ends
// of the same attempt are Other to each other.
func TestCompareNodeStatePairs(t *testing.T) {
	marks := []struct {
		name string
		m    dag.NodeMark
	}{
		{"pending", dag.NodeMark{State: dag.NodePending}},
		{"running", dag.NodeMark{State: dag.NodeRunning}},
		{"will-retry", dag.NodeMark{State: dag.NodeFailed, WillRetry: true}},
		{"succeeded", dag.NodeMark{State: dag.NodeSucceeded}},
		{"failed", dag.NodeMark{State: dag.NodeFailed}},
		{"skipped", dag.NodeMark{State: dag.NodeSkipped}},
		{"blocked", dag.NodeMark{State: dag.NodeBlocked}},
		{"cancelled", dag.NodeMark{State: dag.NodeCancelled}},
	}
	want := orders(t, len(marks), `
		pending     = > > > > > > >
		running     < = > > > > > >
		will-retry  < < = > > > > >
		succeeded   < < < = ~ ~ ~ ~
		failed      < < < ~ = ~ ~ ~
		skipped     < < < ~ ~ = ~ ~
		blocked     < < < ~ ~ ~ = ~
		cancelled   < < < ~ ~ ~ ~ =
	`)
	for i, cur := range marks {
		for j, next := range marks {
			for _, at := range []struct{ gen, attempt int }{{1, 0}, {1, 1}, {3, 7}} {
				c, n := cur.m, next.m
				c.Generation, c.Attempt, n.Generation, n.Attempt = at.gen, at.attempt, at.gen, at.attempt
				if got := dag.CompareNode(c, n); got != want[i][j] {
					t.Errorf("%s then %s (generation %d, attempt %d): %s, want %s", cur.name, next.name, at.gen, at.attempt, got, want[i][j])
				}
			}
		}
	}
}

// Across attempts and generations: a new attempt, or a retry's
// generation, comes after any end; anything of an earlier attempt or
// generation is behind.
func TestCompareNodeAttemptsAndRetries(t *testing.T) {
	mk := func(gen, attempt int, st dag.NodeState, opts ...string) dag.NodeMark {
		return dag.NodeMark{Generation: gen, Attempt: attempt, State: st, WillRetry: len(opts) > 0 && opts[0] == "retry"}
	}
	cases := []struct {
		name      string
		cur, next dag.NodeMark
		want      dag.Order
	}{
		{"the next attempt after a failure that retries", mk(1, 1, dag.NodeFailed, "retry"), mk(1, 2, dag.NodeRunning), dag.Ahead},
		{"a late failure of the attempt before", mk(1, 2, dag.NodeRunning), mk(1, 1, dag.NodeFailed, "retry"), dag.Behind},
		{"a late running of the attempt before", mk(1, 2, dag.NodeSucceeded), mk(1, 1, dag.NodeRunning), dag.Behind},
		{"running stored again after the attempt succeeded", mk(1, 1, dag.NodeSucceeded), mk(1, 1, dag.NodeRunning), dag.Behind},
		{"succeeded stored twice", mk(1, 1, dag.NodeSucceeded), mk(1, 1, dag.NodeSucceeded), dag.Same},
		{"an attempt resumed by another executor", mk(1, 1, dag.NodeRunning), mk(1, 1, dag.NodeRunning), dag.Same},
		{"an attempt announced again, waiting for its host lock", mk(1, 1, dag.NodeRunning), mk(1, 1, dag.NodeRunning), dag.Same},
		{"cancelled between attempts", mk(1, 2, dag.NodeFailed, "retry"), mk(1, 2, dag.NodeCancelled), dag.Ahead},
		{"no attempts left", mk(1, 3, dag.NodeFailed, "retry"), mk(1, 3, dag.NodeFailed), dag.Ahead},
		{"a retry runs a failed node again", mk(1, 3, dag.NodeFailed), mk(2, 4, dag.NodeRunning), dag.Ahead},
		{"a retry blocks a node that failed", mk(1, 3, dag.NodeFailed), mk(2, 0, dag.NodeBlocked), dag.Ahead},
		{"a retry's executor re-announces a success", mk(1, 1, dag.NodeSucceeded), mk(2, 1, dag.NodeSucceeded), dag.Ahead},
		{"a retry runs a node cancelled before it started", mk(1, 0, dag.NodeCancelled), mk(2, 1, dag.NodeRunning), dag.Ahead},
		{"a rollback's delete after the create", mk(1, 1, dag.NodeSucceeded), mk(2, 1, dag.NodeRunning), dag.Ahead},
		{"an earlier generation's attempt settled late", mk(2, 4, dag.NodeSucceeded), mk(1, 3, dag.NodeCancelled), dag.Behind},
		{"an earlier generation's running", mk(2, 0, dag.NodeBlocked), mk(1, 3, dag.NodeRunning), dag.Behind},
		{"the planner's cancel crossing an executor's start", mk(1, 1, dag.NodeRunning), mk(1, 0, dag.NodeCancelled), dag.Behind},
		{"a node blocked by mistake, then run", mk(1, 0, dag.NodeBlocked), mk(1, 1, dag.NodeRunning), dag.Ahead},
		{"skipped at its turn after waiting", mk(1, 2, dag.NodeRunning), mk(1, 2, dag.NodeSkipped), dag.Ahead},
		{"nothing yet", dag.NodeMark{}, mk(1, 0, dag.NodeBlocked), dag.Ahead},
		{"nothing, twice", dag.NodeMark{}, dag.NodeMark{}, dag.Same},
	}
	for _, c := range cases {
		if got := dag.CompareNode(c.cur, c.next); got != c.want {
			t.Errorf("%s: %+v then %+v: %s, want %s", c.name, c.cur, c.next, got, c.want)
		}
	}
}

// Every pair of formula states in one generation, and across generations.
func TestCompareFormula(t *testing.T) {
	sts := []dag.FormulaState{dag.FormulaPending, dag.FormulaReady, dag.FormulaRunning, dag.FormulaSucceeded, dag.FormulaGating,
		dag.FormulaHealthy, dag.FormulaUnhealthy, dag.FormulaFailed, dag.FormulaBlocked, dag.FormulaCancelled}
	want := orders(t, len(sts), `
		pending    = > > > > > > > > >
		ready      < = > > > > > > > >
		running    < < = > > > > > > >
		succeeded  < < < = > > > > > >
		gating     < < < < = > > > > >
		healthy    < < < < < = ~ ~ ~ ~
		unhealthy  < < < < < ~ = ~ ~ ~
		failed     < < < < < ~ ~ = ~ ~
		blocked    < < < < < ~ ~ ~ = ~
		cancelled  < < < < < ~ ~ ~ ~ =
	`)
	for i, cur := range sts {
		for j, next := range sts {
			if got := dag.CompareFormula(dag.FormulaMark{Generation: 2, State: cur}, dag.FormulaMark{Generation: 2, State: next}); got != want[i][j] {
				t.Errorf("%s then %s: %s, want %s", cur, next, got, want[i][j])
			}
			if got := dag.CompareFormula(dag.FormulaMark{Generation: 2, State: cur}, dag.FormulaMark{Generation: 3, State: next}); got != dag.Ahead {
				t.Errorf("%s then %s of the next generation: %s, want ahead", cur, next, got)
			}
			if got := dag.CompareFormula(dag.FormulaMark{Generation: 2, State: cur}, dag.FormulaMark{Generation: 1, State: next}); got != dag.Behind {
				t.Errorf("%s then %s of the generation before: %s, want behind", cur, next, got)
			}
		}
	}
}

// Every pair of workflow states in one generation, and across generations:
// running and paused go back and forth.
func TestCompareWorkflow(t *testing.T) {
	sts := []dag.WorkflowState{dag.WorkflowAccepted, dag.WorkflowRunning, dag.WorkflowPaused, dag.WorkflowSucceeded, dag.WorkflowFailed, dag.WorkflowCancelled}
	want := orders(t, len(sts), `
		accepted   = > > > > >
		running    < = ~ > > >
		paused     < ~ = > > >
		succeeded  < < < = ~ ~
		failed     < < < ~ = ~
		cancelled  < < < ~ ~ =
	`)
	for i, cur := range sts {
		for j, next := range sts {
			if got := dag.CompareWorkflow(dag.WorkflowMark{Generation: 1, State: cur}, dag.WorkflowMark{Generation: 1, State: next}); got != want[i][j] {
				t.Errorf("%s then %s: %s, want %s", cur, next, got, want[i][j])
			}
			if got := dag.CompareWorkflow(dag.WorkflowMark{Generation: 1, State: cur}, dag.WorkflowMark{Generation: 2, State: next}); got != dag.Ahead {
				t.Errorf("%s then %s of a retry: %s, want ahead", cur, next, got)
			}
			if got := dag.CompareWorkflow(dag.WorkflowMark{Generation: 2, State: cur}, dag.WorkflowMark{Generation: 1, State: next}); got != dag.Behind {
				t.Errorf("%s then %s of the run before: %s, want behind", cur, next, got)
			}
		}
	}
	if !dag.Ahead.Moves() || !dag.Other.Moves() || dag.Same.Moves() || dag.Behind.Moves() {
		t.Error("Moves: only ahead and other move a state shown")
	}
}
