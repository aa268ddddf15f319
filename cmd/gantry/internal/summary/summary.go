// Package summary is what a workflow's nodes and formulas have come to:
// how many nodes are done, running, failed, blocked, cancelled or
// skipped, and what failed and why. gantry watch, gantry status, the web
// view and their -o json all show this one model, so they agree.
//
// It counts from the states that end the workflow: each node's and
// formula's last transition across every run (generation) of the
// workflow, ordered as dag.CompareNode and dag.CompareFormula order them.
// A retry that runs a few nodes again leaves the others as the earlier
// run left them, and a formula that failed without a failed node (its
// health gate, its deadline) counts as a failure too.
package summary

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Summary is a workflow's nodes by state, and what failed.
type Summary struct {
	// Total is the number of nodes in the plan (0: not known yet).
	Total int `json:"total"`
	// Done counts the nodes that have ended one way or another
	// (succeeded, skipped, failed, blocked, cancelled).
	Done      int `json:"done"`
	Running   int `json:"running"` // a failed attempt that another follows is running
	Succeeded int `json:"succeeded"`
	Skipped   int `json:"skipped"`
	Blocked   int `json:"blocked"`
	Cancelled int `json:"cancelled"`
	// Failed counts the failures: failed nodes, and formulas that failed
	// without a failed node (a health gate, a deadline).
	Failed int `json:"failed"`
	// Generation is the newest run of the workflow (1, then one more for
	// each retry); Run counts the nodes that run touched when it is a
	// retry.
	Generation int    `json:"generation"`
	Run        *Count `json:"run,omitempty"`
	// Failures are what failed, in the order they failed.
	Failures []Failure `json:"failures,omitempty"`
}

// Count is how many nodes a retry touched, and how many of those ended.
type Count struct {
	Nodes int `json:"nodes"`
	Done  int `json:"done"`
}

// Failure is a failed node, or a formula that failed without a failed
// node (Node empty: its health gate, its deadline).
type Failure struct {
	Formula string `json:"formula"`
	Node    string `json:"node,omitempty"`
	Host    string `json:"host,omitempty"`
	Why     string `json:"why,omitempty"`
}

// Name is "FORMULA/NODE", or the formula's id.
func (f Failure) Name() string {
	if f.Node == "" {
		return f.Formula
	}
	return f.Formula + "/" + f.Node
}

// String is the one-line summary: "3/10 nodes done, 2 running, 1 failed",
// with the blocked and cancelled among the done when there are any, and
// what a retry ran.
func (s Summary) String() string {
	of := ""
	if s.Total > 0 {
		of = fmt.Sprintf("/%d", s.Total)
	}
	out := fmt.Sprintf("%d%s nodes done, %d running, %d failed", s.Done, of, s.Running, s.Failed)
	if s.Blocked > 0 {
		out += fmt.Sprintf(", %d blocked", s.Blocked)
	}
	if s.Cancelled > 0 {
		out += fmt.Sprintf(", %d cancelled", s.Cancelled)
	}
	if s.Run != nil {
		out += fmt.Sprintf(" (run %d: %d/%d of its nodes done)", s.Generation, s.Run.Done, s.Run.Nodes)
	}
	return out
}

// MaxNamed is how many failures FailedLine names; it counts the rest.
const MaxNamed = 5

// FailedLine names what failed, for the end of a run: "failed: db (health
// gate failed after 3 checks: pg_isready: no response), app/config (exit
// status 2)"; past MaxNamed, their count and the first few, and that
// gantry status WORKFLOW_ID lists them all. Empty when nothing failed.
func (s Summary) FailedLine(workflowID string) string {
	if len(s.Failures) == 0 {
		return ""
	}
	named := make([]string, 0, MaxNamed)
	for _, f := range s.Failures[:min(len(s.Failures), MaxNamed)] {
		n := f.Name()
		if f.Why != "" {
			n += " (" + f.Why + ")"
		}
		named = append(named, n)
	}
	if more := len(s.Failures) - len(named); more > 0 {
		return fmt.Sprintf("failed: %d, among them %s and %d more (gantry status %s lists them all)", len(s.Failures), strings.Join(named, ", "), more, workflowID)
	}
	return "failed: " + strings.Join(named, ", ")
}

// Tally folds a workflow's events (and, to start from, its state-store
// document) into a Summary, keeping its counts as it goes: each event
// costs the same however large the workflow. It is not safe for
// concurrent use.
type Tally struct {
	total    int
	gen      int
	nodes    map[string]*node    // formula/node
	formulas map[string]*formula // formula id
	seq      int                 // orders failures
	seen     map[string]bool     // ids of the events taken in
	counts   Summary             // the node counts (Done, Running, ...)
	runs     map[int]*Count      // the nodes whose last transition is of each run
	// failed are the nodes failed now; failedIn counts them by formula;
	// failedFormulas are the formulas failed or unhealthy now.
	failed         map[*node]bool
	failedIn       map[string]int
	failedFormulas map[*formula]bool
}

type node struct {
	formula, name, host string
	mark                dag.NodeMark
	why                 string
	at                  int // when it last changed
}

// state is the node's state as counted: a failed attempt that another
// follows is running.
func (n *node) state() dag.NodeState {
	if n.mark.WillRetry {
		return dag.NodeRunning
	}
	return n.mark.State
}

type formula struct {
	id, host string
	mark     dag.FormulaMark
	why      string // why it failed (a gate's failure, the executor's error)
	at       int
}

// Observe takes an event in; repeat says it was taken in already (the
// same event stored again), and changes nothing.
func (t *Tally) Observe(env *events.Envelope) (repeat bool) {
	if t.seen[env.SeenKey()] {
		return true
	}
	if t.seen == nil {
		t.seen = map[string]bool{}
	}
	t.seen[env.SeenKey()] = true
	pl, _ := env.Payload() // nil, and left out, when it does not decode
	switch e := pl.(type) {
	case *events.WorkflowEvent:
		t.total = max(t.total, e.TotalNodes)
		t.gen = max(t.gen, e.Generation)
	case *events.FormulaEvent:
		if e.Formula != "" {
			t.formula(e.Formula, e.Host, e.Mark(), e.Error)
		}
	case *events.HealthEvent:
		if e.Formula != "" && e.Final && e.Status == events.HealthFail {
			t.formula(e.Formula, e.Host, dag.FormulaMark{Generation: e.Generation, State: dag.FormulaUnhealthy}, e.GateFailure())
		}
	case *events.NodeEvent:
		if e.Formula != "" && e.Node != "" {
			t.node(e.Formula, e.Node, e.Host, e.Mark(), firstLine(e.Error))
		}
	}
	return false
}

// formula moves a formula on when the transition is ahead of its last;
// a gate's failure gives the unhealthy its reason, which the planner's
// own unhealthy (with none) keeps.
func (t *Tally) formula(id, host string, next dag.FormulaMark, why string) {
	if t.formulas == nil {
		t.formulas = map[string]*formula{}
	}
	t.gen = max(t.gen, next.Generation)
	f := t.formulas[id]
	if f == nil {
		f = &formula{id: id, host: host}
		t.formulas[id] = f
	}
	switch dag.CompareFormula(f.mark, next) {
	case dag.Ahead:
		t.seq++
		f.mark, f.why, f.at = next, why, t.seq
		if t.failedFormulas == nil {
			t.failedFormulas = map[*formula]bool{}
		}
		if st := next.State; st == dag.FormulaFailed || st == dag.FormulaUnhealthy {
			t.failedFormulas[f] = true
		} else {
			delete(t.failedFormulas, f)
		}
	case dag.Same:
		if f.why == "" {
			f.why = why
		}
	}
}

func (t *Tally) node(formula, name, host string, next dag.NodeMark, why string) {
	if t.nodes == nil {
		t.nodes = map[string]*node{}
	}
	t.gen = max(t.gen, next.Generation)
	k := formula + "/" + name
	n := t.nodes[k]
	if n == nil {
		n = &node{formula: formula, name: name, host: host}
		t.nodes[k] = n
	}
	if dag.CompareNode(n.mark, next).Moves() {
		t.count(n, -1)
		t.seq++
		n.mark, n.why, n.at = next, why, t.seq
		t.count(n, 1)
	}
}

// count adds a node's last transition to the counts (by -1: takes it
// out).
func (t *Tally) count(n *node, by int) {
	if n.mark.State == "" {
		return
	}
	st := n.state()
	t.counts.add(st, by)
	if t.runs == nil {
		t.runs = map[int]*Count{}
		t.failed, t.failedIn = map[*node]bool{}, map[string]int{}
	}
	r := t.runs[n.mark.Generation]
	if r == nil {
		r = &Count{}
		t.runs[n.mark.Generation] = r
	}
	r.Nodes += by
	if st.Terminal() {
		r.Done += by
	}
	if st == dag.NodeFailed {
		t.failedIn[n.formula] += by
		if by > 0 {
			t.failed[n] = true
		} else {
			delete(t.failed, n)
		}
	}
}

// Seed starts the tally from the state-store's document: what a watch
// started late, or the web view, counts before the events it reads. The
// events that follow move it on.
func (t *Tally) Seed(d *events.WorkflowDoc) {
	t.total = max(t.total, d.NodeCount)
	t.gen = max(t.gen, d.Generation)
	for _, id := range sortedKeys(d.Formulas) {
		fd := d.Formulas[id]
		why := fd.Error
		if fd.Status == dag.FormulaUnhealthy && fd.Health != nil {
			why = fd.Health.GateFailure()
		}
		t.formula(id, fd.Host, dag.FormulaMark{Generation: fd.Generation, State: fd.Status}, why)
		for _, name := range sortedKeys(fd.Nodes) {
			nd := fd.Nodes[name]
			t.node(id, name, fd.Host, nd.LastMark(), firstLine(nd.Error))
		}
	}
}

// FromDoc is the summary of a state-store document.
func FromDoc(d *events.WorkflowDoc) Summary {
	var t Tally
	t.Seed(d)
	return t.Summary()
}

// Summary is what the events taken in say.
func (t *Tally) Summary() Summary {
	s := t.counts
	s.Total, s.Generation = t.total, max(t.gen, 1)
	if r := t.runs[t.gen]; t.gen > 1 {
		s.Run = &Count{}
		if r != nil {
			*s.Run = *r
		}
	}
	type at struct {
		f   Failure
		seq int
	}
	var fails []at
	for n := range t.failed {
		fails = append(fails, at{Failure{Formula: n.formula, Node: n.name, Host: n.host, Why: n.why}, n.at})
	}
	for f := range t.failedFormulas {
		// a formula failed by its failed nodes is said by them
		if f.mark.State == dag.FormulaUnhealthy || t.failedIn[f.id] == 0 {
			fails = append(fails, at{Failure{Formula: f.id, Host: f.host, Why: f.why}, f.at})
		}
	}
	sort.Slice(fails, func(i, j int) bool {
		if fails[i].seq != fails[j].seq {
			return fails[i].seq < fails[j].seq
		}
		return fails[i].f.Name() < fails[j].f.Name()
	})
	for _, f := range fails {
		s.Failures = append(s.Failures, f.f)
	}
	s.Failed = len(s.Failures)
	return s
}

// add counts a node in state st (by -1: takes it out).
func (s *Summary) add(st dag.NodeState, by int) {
	switch st {
	case dag.NodeRunning:
		s.Running += by
		return
	case dag.NodeSucceeded:
		s.Succeeded += by
	case dag.NodeSkipped:
		s.Skipped += by
	case dag.NodeBlocked:
		s.Blocked += by
	case dag.NodeCancelled:
		s.Cancelled += by
	case dag.NodeFailed:
	default:
		return // pending
	}
	s.Done += by
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s
}

// Said is a transition as one phrase, each part said once: the state,
// then why ("cancelled by operator: killed on the host", not "cancelled:
// cancelled by operator: ..."), then the error when it adds to the reason
// (the first line of it). A reason that starts with the state stands for
// it; an error the phrase already holds, or that only repeats that a
// cancelled node was cancelled, is left out.
func Said(state, reason, errText string) string {
	out := state
	if reason != "" {
		if strings.HasPrefix(strings.ToLower(reason), strings.ToLower(state)) {
			out = reason
		} else {
			out += ": " + reason
		}
	}
	e := firstLine(errText)
	switch {
	case e == "", strings.Contains(out, e):
	case state == string(dag.NodeCancelled) && strings.HasPrefix(e, state):
	default:
		out += ": " + e
	}
	return out
}
