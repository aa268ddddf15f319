package webview

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/summary"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// The model of one workflow's page: built from the state-store's document
// and then from the workflow's events, in stream order, so that a page
// loaded late shows what `gantry status` shows. The browser gets it whole
// once (a snapshot), then the parts each event changed (patches).

// TypeProgress is the event type of a node's progress report (payload
// field percent).
const TypeProgress = events.TypeProgressUpdate

// Output bounds: lines kept per node, and per line.
const (
	MaxOutputLines = 200
	maxLineRunes   = 1000
)

// Header is a workflow without its formulas.
type Header struct {
	WorkflowID  string     `json:"workflow_id"`
	Workflow    string     `json:"workflow"`
	Operation   string     `json:"operation"`
	Status      string     `json:"status"`
	Generation  int        `json:"generation"`
	Reason      string     `json:"reason,omitempty"`
	Cancelling  bool       `json:"cancelling,omitempty"`
	SubmittedBy string     `json:"submitted_by,omitempty"` // its name (events.Principal.Display)
	CreatedAt   *time.Time `json:"created_at,omitempty"`
	EndedAt     *time.Time `json:"ended_at,omitempty"`
	// Graph says the formulas and their dependencies are the plan's
	// (from the accepted event); without it they are only those the
	// events named, with no edges.
	Graph bool `json:"graph"`
	// Summary counts the nodes by state and names what failed, as gantry
	// watch and gantry status do.
	Summary summary.Summary `json:"summary"`
	// TraceID is the workflow's trace, from the traceparent header of its
	// events (none for an untraced workflow); TraceURL is the link to it
	// when the web view has a trace URL template.
	TraceID  string `json:"trace_id,omitempty"`
	TraceURL string `json:"trace_url,omitempty"`
}

// Formula is one formula (or instance of a group formula) of the page.
type Formula struct {
	ID        string           `json:"id"`
	Host      string           `json:"host"`
	Of        string           `json:"of,omitempty"`
	Batch     int              `json:"batch,omitempty"`
	Batches   int              `json:"batches,omitempty"`
	DependsOn []dag.FormulaDep `json:"depends_on,omitempty"`
	Gated     bool             `json:"gated,omitempty"`
	Order     int              `json:"order"` // plan order, else first seen
	Status    string           `json:"status"`
	Blocker   string           `json:"blocker,omitempty"`
	Error     string           `json:"error,omitempty"`
	StartedAt *time.Time       `json:"started_at,omitempty"`
	EndedAt   *time.Time       `json:"ended_at,omitempty"`
	Gates     []Gate           `json:"gates,omitempty"` // health-gate attempts
	Nodes     []string         `json:"nodes"`           // names, in run order
	gen       int
}

// Gate is one health-gate check.
type Gate struct {
	Attempt   int        `json:"attempt"`
	Retries   int        `json:"retries"`
	Status    string     `json:"status"`
	Final     bool       `json:"final,omitempty"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	Error     string     `json:"error,omitempty"`
	Output    string     `json:"output,omitempty"`
}

// Node is one node of a formula.
type Node struct {
	Formula   string    `json:"formula"`
	Name      string    `json:"name"`
	DependsOn []string  `json:"depends_on,omitempty"`
	Status    string    `json:"status"`
	Blocker   string    `json:"blocker,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Error     string    `json:"error,omitempty"`
	Check     string    `json:"check,omitempty"`
	Progress  *int      `json:"progress,omitempty"`
	Attempts  []Attempt `json:"attempts,omitempty"`
	// Files are what its last attempt found (and left) of its files,
	// with their diffs in a check with diff.
	Files []events.FileResult `json:"files,omitempty"`
	// Output is the last MaxOutputLines lines; a patch carries it only
	// when it was replaced (from an event's tails), else lines come one by
	// one as Line messages.
	Output []Line `json:"output,omitempty"`
	gen    int
	// mark is where the node's last transition shown stands.
	mark dag.NodeMark
	// fromTail: Output was filled from the tails of a node event.
	fromTail bool
}

// Attempt is one attempt of a node.
type Attempt struct {
	N          int        `json:"n"`
	Status     string     `json:"status"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Error      string     `json:"error,omitempty"`
	WillRetry  bool       `json:"will_retry,omitempty"`
	Generation int        `json:"generation,omitempty"`
}

// Line is one line of a node's output.
type Line struct {
	Formula string `json:"formula,omitempty"`
	Node    string `json:"node,omitempty"`
	Attempt int    `json:"attempt"`
	Stream  string `json:"stream"`
	Text    string `json:"text"`
}

// Rollout is a rolled-out group formula's progress through its batches.
type Rollout struct {
	Formula   string `json:"formula"`
	Batch     int    `json:"batch"`
	Batches   int    `json:"batches"`
	Status    string `json:"status"`
	Failed    int    `json:"failed"`
	MaxFailed int    `json:"max_failed"`
	Reason    string `json:"reason,omitempty"`
}

// Snapshot is the whole page.
type Snapshot struct {
	Header   Header     `json:"workflow"`
	Formulas []*Formula `json:"formulas"`
	Nodes    []*Node    `json:"nodes"`
	Rollouts []*Rollout `json:"rollouts"`
}

// Patch is what one event changed; nil parts did not change.
type Patch struct {
	Header   *Header
	Formulas []*Formula
	Nodes    []*Node
	Rollout  *Rollout
	Line     *Line
}

// Empty says the event changed nothing on the page.
func (p *Patch) Empty() bool {
	return p.Header == nil && len(p.Formulas) == 0 && len(p.Nodes) == 0 && p.Rollout == nil && p.Line == nil
}

// Model is one workflow's page state. It is not safe for concurrent use.
// A transition is shown only when it is not behind what the page shows
// (dag.CompareNode, CompareFormula, CompareWorkflow), and an event stored
// twice is applied once.
type Model struct {
	// TraceURL is the trace URL template (with {trace_id}), if any.
	TraceURL string
	h        Header
	formulas map[string]*Formula
	nodes    map[string]*Node // formula/node
	rollouts map[string]*Rollout
	seen     map[string]bool // ids of the events applied
	tally    summary.Tally
}

// NewModel starts the page of workflow id.
func NewModel(id string) *Model {
	return &Model{h: Header{WorkflowID: id}, formulas: map[string]*Formula{}, nodes: map[string]*Node{}, rollouts: map[string]*Rollout{}, seen: map[string]bool{}}
}

// DocNode is the state-store's node with the progress that newer
// state-stores record.
type DocNode struct {
	events.NodeDoc
	Progress *int `json:"progress,omitempty"`
}

// DocFormula is the state-store's formula with DocNode nodes.
type DocFormula struct {
	events.FormulaDoc
	Nodes map[string]*DocNode `json:"nodes"`
}

// Doc is the state-store's workflow document, as the page reads it.
type Doc struct {
	events.WorkflowDoc
	Formulas map[string]*DocFormula `json:"formulas,omitempty"`
}

// Hosts are the hosts of the document's formulas, when it has every
// formula of the workflow (FormulaCount); else none.
func (d *Doc) Hosts() []string {
	if len(d.Formulas) == 0 || len(d.Formulas) < d.FormulaCount {
		return nil
	}
	var hosts []string
	for _, f := range d.Formulas {
		if f.Host == "" {
			return nil
		}
		if !slices.Contains(hosts, f.Host) {
			hosts = append(hosts, f.Host)
		}
	}
	slices.Sort(hosts)
	return hosts
}

// Seed fills the model from the state-store's document: what the page
// shows if the events that built it have left the stream.
func (m *Model) Seed(d *Doc) {
	m.tally.Seed(d.plain())
	m.h.Summary = m.tally.Summary()
	m.h.Workflow, m.h.Operation, m.h.Status, m.h.Generation = d.Workflow, string(d.Operation), string(d.Status), d.Generation
	m.h.Reason = d.Error
	created := d.CreatedAt
	m.h.CreatedAt, m.h.EndedAt = &created, d.EndedAt
	if d.SubmittedBy != nil {
		m.h.SubmittedBy = d.SubmittedBy.Display()
	}
	ids := make([]string, 0, len(d.Formulas))
	for id := range d.Formulas {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fd := d.Formulas[id]
		f := m.formula(id, fd.Host)
		f.Status, f.Blocker, f.Error, f.StartedAt, f.EndedAt, f.gen = string(fd.Status), fd.Blocker, fd.Error, fd.StartedAt, fd.EndedAt, fd.Generation
		if fd.Health != nil {
			f.Gates = []Gate{{Attempt: fd.Health.Attempts, Status: string(fd.Health.Status), Final: fd.Health.Final, Error: fd.Health.Error, Output: fd.Health.Output}}
		}
		names := make([]string, 0, len(fd.Nodes))
		for n := range fd.Nodes {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, name := range names {
			nd := fd.Nodes[name]
			n := m.node(id, name)
			n.Status, n.Blocker, n.Error, n.Check, n.Progress, n.gen = string(nd.Status), nd.Blocker, nd.Error, string(nd.Check), nd.Progress, nd.Generation
			n.Files = nd.Files
			n.mark = nd.LastMark()
			if nd.LastAttempt > 0 || nd.StartedAt != nil {
				n.Attempts = []Attempt{{N: max(nd.LastAttempt, 1), Status: string(nd.Status), StartedAt: nd.StartedAt, EndedAt: nd.EndedAt, ExitCode: nd.ExitCode, Error: nd.Error, Generation: nd.Generation}}
			}
		}
	}
}

// plain is the document as the state-store's type has it.
func (d *Doc) plain() *events.WorkflowDoc {
	wd := d.WorkflowDoc
	wd.Formulas = make(map[string]*events.FormulaDoc, len(d.Formulas))
	for id, f := range d.Formulas {
		fd := f.FormulaDoc
		fd.Nodes = make(map[string]*events.NodeDoc, len(f.Nodes))
		for name, n := range f.Nodes {
			fd.Nodes[name] = &n.NodeDoc
		}
		wd.Formulas[id] = &fd
	}
	return &wd
}

// Snapshot is the whole page, formulas and nodes in order.
func (m *Model) Snapshot() Snapshot {
	s := Snapshot{Header: m.h, Formulas: make([]*Formula, 0, len(m.formulas)), Nodes: make([]*Node, 0, len(m.nodes)), Rollouts: make([]*Rollout, 0, len(m.rollouts))}
	for _, f := range m.formulas {
		s.Formulas = append(s.Formulas, f)
	}
	slices.SortFunc(s.Formulas, func(a, b *Formula) int {
		if a.Order != b.Order {
			return a.Order - b.Order
		}
		return strings.Compare(a.ID, b.ID)
	})
	for _, f := range s.Formulas {
		for _, name := range f.Nodes {
			s.Nodes = append(s.Nodes, m.nodes[f.ID+"/"+name])
		}
	}
	for _, r := range m.rollouts {
		s.Rollouts = append(s.Rollouts, r)
	}
	slices.SortFunc(s.Rollouts, func(a, b *Rollout) int { return strings.Compare(a.Formula, b.Formula) })
	return s
}

func (m *Model) formula(id, host string) *Formula {
	f, ok := m.formulas[id]
	if !ok {
		f = &Formula{ID: id, Host: host, Order: 1 << 30, Status: string(dag.FormulaPending), Nodes: []string{}}
		m.formulas[id] = f
	}
	if f.Host == "" {
		f.Host = host
	}
	return f
}

func (m *Model) node(formula, name string) *Node {
	key := formula + "/" + name
	n, ok := m.nodes[key]
	if !ok {
		n = &Node{Formula: formula, Name: name, Status: string(dag.NodePending)}
		m.nodes[key] = n
		f := m.formula(formula, "")
		f.Nodes = append(f.Nodes, name)
	}
	return n
}

// ApplyGraph lays out the plan's formulas and nodes.
func (m *Model) ApplyGraph(g *events.Graph) {
	m.h.Graph = true
	for i, gf := range g.Formulas {
		f := m.formula(gf.ID, gf.Host)
		f.Of, f.Batch, f.Batches, f.DependsOn, f.Gated, f.Order = gf.Of, gf.Batch, gf.Batches, gf.DependsOn, gf.Gate, i
		order := make([]string, 0, len(gf.Nodes))
		for _, gn := range gf.Nodes {
			m.node(gf.ID, gn.Name).DependsOn = gn.DependsOn
			order = append(order, gn.Name)
		}
		for _, name := range f.Nodes { // named by the document but not the plan
			if !slices.Contains(order, name) {
				order = append(order, name)
			}
		}
		f.Nodes = order
	}
}

// ApplyEvent applies one event of the workflow and says what changed. An
// event applied already (the same id, stored again) changes nothing.
func (m *Model) ApplyEvent(env *events.Envelope) Patch {
	if m.seen[env.SeenKey()] {
		return Patch{}
	}
	m.seen[env.SeenKey()] = true
	p := m.applyEvent(env)
	m.tally.Observe(env)
	if sum := m.tally.Summary(); !reflect.DeepEqual(sum, m.h.Summary) {
		m.h.Summary = sum
		hc := m.h
		p.Header = &hc
	}
	return p
}

func (m *Model) applyEvent(env *events.Envelope) Patch {
	if env.Type == TypeProgress {
		return m.applyProgress(env)
	}
	pl, _ := env.Payload() // nil, and left out, when it does not decode
	switch e := pl.(type) {
	case *events.WorkflowEvent:
		return m.applyWorkflow(env, e)
	case *events.FormulaEvent:
		if e.Formula != "" {
			return m.applyFormula(e)
		}
	case *events.NodeEvent:
		if e.Formula != "" && e.Node != "" {
			return m.applyNode(e)
		}
	case *events.HealthEvent:
		if e.Formula != "" {
			return m.applyHealth(e)
		}
	case *events.RolloutEvent:
		if e.Formula != "" {
			return m.applyRollout(e)
		}
	}
	return Patch{}
}

func (m *Model) applyWorkflow(env *events.Envelope, e *events.WorkflowEvent) Patch {
	h := &m.h
	var p Patch
	if e.Graph != nil && !h.Graph { // the plan's shape, whatever run this is
		m.ApplyGraph(e.Graph)
		snap := m.Snapshot()
		p.Formulas, p.Nodes = snap.Formulas, snap.Nodes
		for i, n := range p.Nodes {
			out := *n
			out.Output = nil
			p.Nodes[i] = &out
		}
	}
	if dag.CompareWorkflow(dag.WorkflowMark{Generation: h.Generation, State: dag.WorkflowState(h.Status)}, e.Mark()) == dag.Behind {
		return p // of an earlier run, or a running or pause after the run ended
	}
	h.Workflow, h.Operation, h.Generation = e.Workflow, string(e.Operation), max(e.Generation, 1)
	h.Status, h.Reason, h.Cancelling = string(e.Status), e.Reason, e.Cancelling
	if e.Status == dag.WorkflowAccepted {
		t := env.Time
		if h.CreatedAt == nil {
			h.CreatedAt = &t
		}
		if e.RequestedBy != nil {
			h.SubmittedBy = e.RequestedBy.Display()
		}
	}
	h.EndedAt = nil
	if e.Status.Terminal() {
		h.EndedAt = e.EndedAt
	}
	hc := *h
	p.Header = &hc
	return p
}

func (m *Model) applyFormula(e *events.FormulaEvent) Patch {
	f := m.formula(e.Formula, e.Host)
	if dag.CompareFormula(dag.FormulaMark{Generation: f.gen, State: dag.FormulaState(f.Status)}, e.Mark()) == dag.Behind {
		return Patch{} // of an earlier run, or behind what the formula has done
	}
	f.gen = e.Generation
	f.Status, f.Blocker, f.Error = string(e.Status), e.Blocker, e.Error
	if e.Status == dag.FormulaRunning || e.StartedAt != nil && f.StartedAt == nil {
		f.StartedAt = e.StartedAt
	}
	f.EndedAt = e.EndedAt
	return Patch{Formulas: []*Formula{f}}
}

func (m *Model) applyNode(e *events.NodeEvent) Patch {
	m.formula(e.Formula, e.Host)
	n := m.node(e.Formula, e.Node)
	// An older run's attempt is history: kept, but it says nothing of the
	// node now; nor does a transition behind the node's last one.
	if next := e.Mark(); dag.CompareNode(n.mark, next) != dag.Behind {
		if e.Status == dag.NodeRunning && (next.Attempt != n.mark.Attempt || next.Generation != n.mark.Generation) {
			// A new attempt: its own progress and files, once it says them
			// (as the state-store's projection does).
			n.Progress, n.Files = nil, nil
		}
		n.gen, n.mark = e.Generation, next
		n.Status, n.Blocker, n.Reason, n.Error, n.Check = string(e.Status), e.Blocker, e.Reason, e.Error, string(e.Check)
		if e.Files != nil {
			n.Files = e.Files
		}
	}
	if e.Attempt > 0 {
		a := n.attempt(e.Attempt)
		if dag.CompareNode(a.mark(), e.Mark()) == dag.Behind {
			return Patch{} // a running of an attempt that has ended
		}
		a.Status, a.Error, a.WillRetry, a.Generation = string(e.Status), e.Error, e.WillRetry, e.Generation
		if e.StartedAt != nil {
			a.StartedAt = e.StartedAt
		}
		if e.EndedAt != nil {
			a.EndedAt, a.ExitCode = e.EndedAt, e.ExitCode
		}
	}
	out := *n
	out.Output = nil
	if n.fillFromTails(e) {
		out.Output = n.Output
	}
	return Patch{Nodes: []*Node{&out}}
}

// mark is where the attempt's last transition shown stands.
func (a *Attempt) mark() dag.NodeMark {
	return dag.NodeMark{Generation: a.Generation, Attempt: a.N, State: dag.NodeState(a.Status), WillRetry: a.WillRetry}
}

// attempt is attempt number k, added if new.
func (n *Node) attempt(k int) *Attempt {
	for i := range n.Attempts {
		if n.Attempts[i].N == k {
			return &n.Attempts[i]
		}
	}
	n.Attempts = append(n.Attempts, Attempt{N: k})
	slices.SortFunc(n.Attempts, func(a, b Attempt) int { return a.N - b.N })
	return n.attempt(k)
}

// fillFromTails gives a node that ended with no output lines of that
// attempt (the log stream no longer has them) its event's output tails.
func (n *Node) fillFromTails(e *events.NodeEvent) bool {
	if e.StdoutTail == "" && e.StderrTail == "" {
		return false
	}
	for _, l := range n.Output {
		if l.Attempt == e.Attempt && !n.fromTail {
			return false
		}
	}
	n.Output, n.fromTail = nil, true
	for _, t := range []struct {
		s    events.Stream
		text string
	}{{events.Stdout, e.StdoutTail}, {events.Stderr, e.StderrTail}} {
		for _, l := range strings.Split(strings.TrimRight(t.text, "\n"), "\n") {
			if t.text != "" {
				n.addLine(Line{Attempt: e.Attempt, Stream: string(t.s), Text: l})
			}
		}
	}
	return true
}

func (n *Node) addLine(l Line) {
	if r := []rune(l.Text); len(r) > maxLineRunes {
		l.Text = string(r[:maxLineRunes]) + "…"
	}
	l.Formula, l.Node = "", ""
	n.Output = append(n.Output, l)
	if len(n.Output) > MaxOutputLines {
		n.Output = slices.Clone(n.Output[len(n.Output)-MaxOutputLines:])
	}
}

func (m *Model) applyHealth(e *events.HealthEvent) Patch {
	f := m.formula(e.Formula, e.Host)
	g := Gate{Attempt: e.Attempt, Retries: e.Retries, Status: string(e.Status), Final: e.Final, StartedAt: e.StartedAt, EndedAt: e.EndedAt,
		ExitCode: e.ExitCode, Error: e.Error, Output: e.OutputTail}
	for i := range f.Gates {
		if f.Gates[i].Attempt == g.Attempt && f.Gates[i].Final == g.Final {
			f.Gates[i] = g
			return Patch{Formulas: []*Formula{f}}
		}
	}
	f.Gates = append(f.Gates, g)
	return Patch{Formulas: []*Formula{f}}
}

func (m *Model) applyRollout(e *events.RolloutEvent) Patch {
	r, ok := m.rollouts[e.Formula]
	if !ok {
		r = &Rollout{Formula: e.Formula}
		m.rollouts[e.Formula] = r
	}
	r.Batch, r.Batches, r.Status, r.Failed, r.MaxFailed, r.Reason = e.Batch, e.Batches, string(e.Status), e.Failed, e.MaxFailed, e.Reason
	for _, id := range e.Instances {
		if f, ok := m.formulas[id]; ok && f.Of == "" {
			f.Of, f.Batch, f.Batches = e.Formula, e.Batch, e.Batches
		}
	}
	rc := *r
	return Patch{Rollout: &rc}
}

// progressData is the payload of a progress event.
type progressData struct {
	events.Ref
	Attempt int `json:"attempt"`
	Percent int `json:"percent"`
}

func (m *Model) applyProgress(env *events.Envelope) Patch {
	var e progressData
	if json.Unmarshal(env.Data, &e) != nil || e.Formula == "" || e.Node == "" || e.Percent < 0 || e.Percent > 100 {
		return Patch{}
	}
	n := m.node(e.Formula, e.Node)
	if at := n.mark; e.Generation < n.gen || at.State != "" && (at.State != dag.NodeRunning || at.Generation != e.Generation || at.Attempt != e.Attempt) {
		return Patch{} // not of the attempt running now (one stored after its end)
	}
	pct := e.Percent
	n.Progress = &pct
	out := *n
	out.Output = nil
	return Patch{Nodes: []*Node{&out}}
}

// ApplyTrace notes the workflow's trace id (from an event's traceparent
// header); the header changes when it had none.
func (m *Model) ApplyTrace(traceID string) Patch {
	if traceID == "" || m.h.TraceID != "" {
		return Patch{}
	}
	m.h.TraceID, m.h.TraceURL = traceID, TraceLink(m.TraceURL, traceID)
	hc := m.h
	return Patch{Header: &hc}
}

// ApplyLine adds a line of a node's output.
func (m *Model) ApplyLine(l *events.LogLine) Patch {
	if l.Formula == "" || l.Node == "" {
		return Patch{}
	}
	n := m.node(l.Formula, l.Node)
	line := Line{Attempt: l.Attempt, Stream: string(l.Stream), Text: l.Line}
	if n.fromTail { // lines after all: they replace the tails
		n.Output, n.fromTail = nil, false
		n.addLine(line)
		out := *n
		return Patch{Nodes: []*Node{&out}}
	}
	n.addLine(line)
	sent := n.Output[len(n.Output)-1]
	sent.Formula, sent.Node = l.Formula, l.Node
	return Patch{Line: &sent}
}
