package webview

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// ListModel is the list page: the state-store's rows, kept up to date by
// the workflows' lifecycle events the way the state-store projects them.
type ListModel struct {
	limit int
	rows  map[string]*events.WorkflowSummary
	// gens are the rows' run generations, as the events said (a row of
	// the state-store's has none until an event of it comes).
	gens map[string]int
}

// NewListModel keeps at most limit rows, the newest.
func NewListModel(limit int) *ListModel {
	return &ListModel{limit: max(limit, 1), rows: map[string]*events.WorkflowSummary{}, gens: map[string]int{}}
}

// Seed replaces the rows with state.list's.
func (m *ListModel) Seed(rows []events.WorkflowSummary) {
	m.rows, m.gens = map[string]*events.WorkflowSummary{}, map[string]int{}
	for i := range rows {
		r := rows[i]
		m.rows[r.WorkflowID] = &r
	}
	m.trim()
}

// Row is the list's row of workflow id.
func (m *ListModel) Row(id string) (events.WorkflowSummary, bool) {
	r := m.rows[id]
	if r == nil {
		return events.WorkflowSummary{}, false
	}
	return *r, true
}

// Knows says whether the list has a row for workflow id.
func (m *ListModel) Knows(id string) bool { return m.rows[id] != nil }

// Add adds (or replaces) one row, as the state-store has it.
func (m *ListModel) Add(r events.WorkflowSummary) { m.rows[r.WorkflowID] = &r }

// Rows are the rows, newest first (as state.list orders them).
func (m *ListModel) Rows() []events.WorkflowSummary {
	out := make([]events.WorkflowSummary, 0, len(m.rows))
	for _, r := range m.rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].WorkflowID > out[j].WorkflowID
	})
	return out
}

// Apply folds a workflow lifecycle event into its row and returns the
// row as it now is, or nil when the event changes nothing (not a
// workflow event, older than what the row shows: the state-store had
// already projected it when the list was read, or behind the row's state
// by dag.CompareWorkflow: a running after the run ended). A workflow the list
// does not know gets a row from the event alone; Add its state-store row
// first to have its start and submitter.
func (m *ListModel) Apply(env *events.Envelope) *events.WorkflowSummary {
	pl, _ := env.Payload()
	e, ok := pl.(*events.WorkflowEvent)
	if !ok || !dag.IsToken(e.WorkflowID) || !e.Status.Valid() {
		return nil
	}
	r := m.rows[e.WorkflowID]
	if r == nil {
		r = &events.WorkflowSummary{WorkflowID: e.WorkflowID, CreatedAt: env.Time}
		m.rows[e.WorkflowID] = r
	} else if env.Time.Before(r.UpdatedAt) || dag.CompareWorkflow(dag.WorkflowMark{Generation: m.gens[e.WorkflowID], State: r.Status}, e.Mark()) == dag.Behind {
		return nil
	}
	m.gens[e.WorkflowID] = e.Generation
	if e.Workflow != "" {
		r.Workflow = e.Workflow
	}
	if e.Operation != "" {
		r.Operation = e.Operation
	}
	r.Status, r.EndedAt, r.UpdatedAt = e.Status, e.EndedAt, env.Time
	if e.Status.Terminal() && r.EndedAt == nil {
		t := env.Time
		r.EndedAt = &t
	}
	if e.Status == dag.WorkflowAccepted {
		r.CreatedAt = env.Time
		if e.RequestedBy != nil {
			r.SubmittedBy = e.RequestedBy
		}
	}
	if n := sum(e.Formulas); n > 0 {
		r.Formulas, r.Nodes = n, e.TotalNodes
	}
	out := *r
	m.trim()
	if !m.Knows(out.WorkflowID) {
		return nil // older than every row the list keeps
	}
	return &out
}

// trim drops the oldest rows beyond the limit.
func (m *ListModel) trim() {
	if len(m.rows) <= m.limit {
		return
	}
	for _, r := range m.Rows()[m.limit:] {
		delete(m.rows, r.WorkflowID)
		delete(m.gens, r.WorkflowID)
	}
}

func sum(counts map[events.FormulaState]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}

// summaryOf is the state-store document's row.
func summaryOf(d *Doc) events.WorkflowSummary {
	return events.WorkflowSummary{WorkflowID: d.WorkflowID, Workflow: d.Workflow, Operation: d.Operation, Status: d.Status,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, Formulas: d.FormulaCount, Nodes: d.NodeCount,
		EndedAt: d.EndedAt, SubmittedBy: d.SubmittedBy}
}

// listStream is the list page as server-sent events: "snapshot" (every
// row, newest first) once state.list is read, then "row" for each
// workflow that appears or changes; "problem" when the event stream
// cannot be read, after which the browser reconnects and gets a new
// snapshot.
func (s *Server) listStream(w http.ResponseWriter, r *http.Request) {
	limit, ok := listLimit(w, r)
	if !ok {
		return
	}
	fl, release, ok := s.beginStream(w)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	items := make(chan Item, 256)
	errc := make(chan error, 1)
	go func() { errc <- s.Src.Lifecycle(ctx, items) }()
	m, err := s.seedList(ctx, limit, items, errc)
	if err != nil {
		s.log().Warn("web view: list", "err", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	rows, unknown := s.rowsOf(ctx, m.Rows())
	found := make(chan Row, 16)
	for _, r := range unknown {
		go s.awaitVerdict(ctx, r, found)
	}
	sse := s.newSSE(w, fl)
	if !sse.retry(listRetry) || !sse.send("snapshot", rows) {
		return
	}
	s.followList(ctx, sse, m, listFeed{items: items, errc: errc, found: found})
}

// listFeed is what a list page follows: the lifecycle events, why they
// stopped, and check runs' verdicts as they become known.
type listFeed struct {
	items <-chan Item
	errc  <-chan error
	found chan Row
}

// listRetry is how long the browser waits before it reconnects a list
// stream that dropped.
const listRetry = 3 * time.Second

// seedList waits until the lifecycle events are read from now on, then
// reads state.list: an event from then on is either in the list or
// comes after it.
func (s *Server) seedList(ctx context.Context, limit int, items <-chan Item, errc <-chan error) (*ListModel, error) {
	select {
	case it := <-items:
		if !it.CaughtUp {
			return nil, errors.New("lifecycle events before their start")
		}
	case err := <-errc:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rows, err := s.Src.List(ctx, limit)
	if err != nil {
		return nil, err
	}
	m := NewListModel(limit)
	m.Seed(rows)
	return m, nil
}

func (s *Server) followList(ctx context.Context, sse *sseWriter, m *ListModel, feed listFeed) {
	tick := time.NewTicker(s.heartbeat())
	defer tick.Stop()
	for {
		select {
		case it := <-feed.items:
			if it.Event == nil {
				continue
			}
			s.knowRow(ctx, m, it.Event)
			if row := m.Apply(it.Event); row != nil && !sse.send("row", s.rowOf(ctx, row, feed.found)) {
				return
			}
		case r := <-feed.found:
			if now, ok := m.Row(r.WorkflowID); ok && now.UpdatedAt.Equal(r.UpdatedAt) && !sse.send("row", r) {
				return
			}
		case err := <-feed.errc:
			if ctx.Err() == nil && err != nil {
				s.log().Warn("web view: list events", "err", err)
				sse.send("problem", map[string]string{"message": err.Error()})
			}
			return
		case <-tick.C:
			if !sse.comment() {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// rowOf is the row with its check verdict when known; when it is not
// known yet, it is asked for until it is, and sent on found then.
func (s *Server) rowOf(ctx context.Context, r *events.WorkflowSummary, found chan Row) Row {
	if !wantsVerdict(r) {
		return Row{WorkflowSummary: *r}
	}
	if n, ok := s.verdicts.get(r); ok {
		return Row{WorkflowSummary: *r, Changes: &n}
	}
	go s.awaitVerdict(ctx, *r, found)
	return Row{WorkflowSummary: *r}
}

// knowRow adds the state-store's row of a workflow the list does not
// show yet when the event is not its start (a retry of an older run):
// the row then has its start and submitter.
func (s *Server) knowRow(ctx context.Context, m *ListModel, env *events.Envelope) {
	if env.Type.Family() != events.FamilyWorkflow || env.Type == events.WorkflowType(dag.WorkflowAccepted) {
		return
	}
	id, _, _ := strings.Cut(env.Subject, "/")
	if !dag.IsToken(id) || m.Knows(id) {
		return
	}
	d, err := s.Src.Workflow(ctx, id)
	if err != nil {
		return // the event alone makes the row
	}
	m.Add(summaryOf(d))
}
