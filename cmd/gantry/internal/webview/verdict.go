package webview

import (
	"context"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Row is a row of the list: state.list's, and for an operation: check
// run that succeeded, how many of its nodes would change (none when not
// known yet). A check run with changes is not shown as a plain success.
type Row struct {
	events.WorkflowSummary
	Changes *int `json:"changes,omitempty"`
}

// Changes counts the nodes of a check run's document whose check found
// they would change; ok is false when the document is not a check run
// that succeeded, or not every node of it has ended yet (the state-store
// has not applied them all).
func Changes(d *Doc) (n int, ok bool) {
	if d.Operation != dag.OpCheck || d.Status != dag.WorkflowSucceeded || len(d.Formulas) < d.FormulaCount {
		return 0, false
	}
	for _, f := range d.Formulas {
		for _, nd := range f.Nodes {
			if !nd.Status.Terminal() {
				return 0, false
			}
			if nd.Check == events.CheckWouldChange {
				n++
			}
		}
	}
	return n, true
}

// wantsVerdict says whether a row is a check run that succeeded.
func wantsVerdict(r *events.WorkflowSummary) bool {
	return r.Operation == dag.OpCheck && r.Status == dag.WorkflowSucceeded
}

// verdictCache remembers each check run's count of changes, by workflow
// and the row's last change (a retried run is asked again).
type verdictCache struct {
	mu sync.Mutex
	m  map[string]verdict
}

type verdict struct {
	at      time.Time
	changes int
}

// maxVerdicts bounds the cache; it starts over when full.
const maxVerdicts = 4096

func (c *verdictCache) get(r *events.WorkflowSummary) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[r.WorkflowID]
	return v.changes, ok && v.at.Equal(r.UpdatedAt)
}

func (c *verdictCache) put(r *events.WorkflowSummary, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxVerdicts {
		c.m = map[string]verdict{}
	}
	c.m[r.WorkflowID] = verdict{at: r.UpdatedAt, changes: n}
}

// verdictOf is what a check run found, from the cache or the
// state-store's document; ok is false when it is not known (yet).
func (s *Server) verdictOf(ctx context.Context, r *events.WorkflowSummary) (int, bool) {
	if !wantsVerdict(r) {
		return 0, false
	}
	if n, ok := s.verdicts.get(r); ok {
		return n, true
	}
	d, err := s.Src.Workflow(ctx, r.WorkflowID)
	if err != nil {
		return 0, false
	}
	n, ok := Changes(d)
	if ok {
		s.verdicts.put(r, n)
	}
	return n, ok
}

// rowsOf are the rows with what the check runs among them found, read at
// most 8 at a time; unknown lists the check runs whose verdict is not
// known yet.
func (s *Server) rowsOf(ctx context.Context, sums []events.WorkflowSummary) (rows []Row, unknown []events.WorkflowSummary) {
	rows = make([]Row, len(sums))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	var mu sync.Mutex
	for i := range sums {
		rows[i].WorkflowSummary = sums[i]
		if !wantsVerdict(&sums[i]) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if n, ok := s.verdictOf(ctx, &sums[i]); ok {
				rows[i].Changes = &n
				return
			}
			mu.Lock()
			unknown = append(unknown, sums[i])
			mu.Unlock()
		}()
	}
	wg.Wait()
	return rows, unknown
}

// awaitVerdict asks for a check run's verdict until the state-store has
// applied every node of it (a row's end can come before), with backoff,
// for at most a minute; it sends the row with it on found.
func (s *Server) awaitVerdict(ctx context.Context, r events.WorkflowSummary, found chan<- Row) {
	wait := 100 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	for {
		if n, ok := s.verdictOf(ctx, &r); ok {
			select {
			case found <- Row{WorkflowSummary: r, Changes: &n}:
			case <-ctx.Done():
			}
			return
		}
		if time.Now().Add(wait).After(deadline) {
			return
		}
		select {
		case <-time.After(wait):
			wait = min(2*wait, 5*time.Second)
		case <-ctx.Done():
			return
		}
	}
}
