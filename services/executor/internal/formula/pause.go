package formula

import (
	"context"
	"sort"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A paused workflow starts no new node anywhere: a node that runs
// finishes, but before a formula starts its next nodes it reads its run
// state (gantry_runs, which the planner has saved paused before it
// answers the pause), and while that says paused it holds them. The
// workflow's next event on the bus that is not "paused" (its resume, a
// cancel, its end) wakes it at once; a resume missed on the bus is read
// in the run state, every PausePoll.

// PausePoll is how often a formula held by a pause reads its run state
// again.
var PausePoll = time.Second

// Resumed wakes the formulas of the workflow held by a pause: they read
// their run state again. The executor calls it for every event of the
// workflow on the bus but "paused".
func (x *Executor) Resumed(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for ch := range x.resumes[id] {
		close(ch)
	}
	delete(x.resumes, id)
}

// awaitResume is a channel closed by the workflow's next Resumed, and
// what to call when no longer waiting.
func (x *Executor) awaitResume(id string) (<-chan struct{}, func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.resumes == nil {
		x.resumes = map[string]map[chan struct{}]struct{}{}
	}
	if x.resumes[id] == nil {
		x.resumes[id] = map[chan struct{}]struct{}{}
	}
	ch := make(chan struct{})
	x.resumes[id][ch] = struct{}{}
	return ch, func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if _, ok := x.resumes[id][ch]; ok {
			delete(x.resumes[id], ch)
			if len(x.resumes[id]) == 0 {
				delete(x.resumes, id)
			}
		}
	}
}

// Held are the formulas holding their next nodes because their workflow
// is paused (at most events.MaxStatusItems, the longest held first), and
// how many there are.
func (x *Executor) Held() ([]events.HeldFormula, int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	held := make([]events.HeldFormula, 0, len(x.held))
	for _, h := range x.held {
		held = append(held, h)
	}
	sort.Slice(held, func(i, j int) bool { return held[i].Since.Before(held[j].Since) })
	n := len(held)
	return held[:min(n, events.MaxStatusItems)], n
}

func (x *Executor) hold(f *formulaRun, since time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.held == nil {
		x.held = map[*formulaRun]events.HeldFormula{}
	}
	if _, ok := x.held[f]; !ok {
		x.held[f] = events.HeldFormula{WorkflowID: f.d.WorkflowID, Formula: f.d.Formula, Host: f.d.Ref.Host, Since: since}
	}
}

func (x *Executor) unhold(f *formulaRun) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.held, f)
}

// pauseState is what the run state says of a pause, for the formula
// about to start nodes.
type pauseState struct {
	resumed <-chan struct{} // closed when the bus says the workflow goes on
	done    func()
}

// paused says whether the formula's workflow is paused in its generation
// (read in its run state), with what wakes it. A run state that cannot be
// read holds nothing: the pause is the planner's to keep, and a read
// that fails must not stop a run.
//
// The first look, before the formula starts any node, is at the run state
// read when the dispatch came, unless something was read or waited for
// since (lookAgain); the next ones read it again.
func (f *formulaRun) paused(ctx context.Context) (*pauseState, bool) {
	var w events.RunSnapshot
	var err error
	var resumed <-chan struct{}
	var done func()
	if st := f.atDispatch; st != nil {
		f.atDispatch = nil
		w, resumed, done = st.w, st.resumed, st.done
	} else {
		resumed, done = f.x.awaitResume(f.d.WorkflowID) // before the read: a resume after it wakes us
		w, _, err = f.x.Runs.Get(ctx, f.d.WorkflowID)
	}
	if err != nil || w.Generation != f.d.Generation || w.Status != dag.WorkflowPaused {
		if err != nil && ctx.Err() == nil {
			f.log.Debug("cannot read the run state to see whether the workflow is paused; going on", "err", err)
		}
		done()
		return nil, false
	}
	return &pauseState{resumed: resumed, done: done}, true
}

// pauseOutcome is what ended a wait of a held formula.
type pauseOutcome int

const (
	pauseLookAgain pauseOutcome = iota // resumed, cancelled, or time to read the run state again
	pauseResult                        // a running node ended: take its result
	pauseStopping                      // the executor stops
)

// waitPaused waits, while the formula holds its next nodes, for the bus
// to say the workflow goes on, the formula to be stopped, the executor to
// stop, a running node to end (its result is returned), or PausePoll.
func (f *formulaRun) waitPaused(p *pauseState, results <-chan nodeResult) (pauseOutcome, nodeResult) {
	t := time.NewTimer(PausePoll)
	defer t.Stop()
	select {
	case <-p.resumed:
	case <-f.stop.Done():
	case <-t.C:
	case <-f.x.stopping():
		return pauseStopping, nodeResult{}
	case r := <-results:
		return pauseResult, r
	}
	return pauseLookAgain, nodeResult{}
}
