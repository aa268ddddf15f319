package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Work nobody takes. A formula's dispatch goes to the executors of its
// host's zone (the durable consumer executor-zone-<zone>, or executor for
// hosts without one). When none runs, nothing would ever take it, and the
// formula would stay ready without a word. So the planner notes when each
// dispatch was made, and once one has waited UnclaimedAfter without an
// executor saying it runs it, looks at its zone's consumer: when no
// executor takes the zone's work (events.Takers.Nobody) or the zone's
// executors are all busy with work queued behind, it publishes the
// formula ready again with the reason as its error, which gantry status
// and watch show. A cancel, or a deadline, ends such a formula at once:
// the planner knows no executor holds it.

// DefaultUnclaimedAfter is how long a dispatch may wait for an executor
// before the planner says that none has taken it (--unclaimed-after).
const DefaultUnclaimedAfter = 30 * time.Second

func (e *Engine) unclaimedAfter() time.Duration {
	if e.UnclaimedAfter > 0 {
		return e.UnclaimedAfter
	}
	return DefaultUnclaimedAfter
}

type waitKey struct {
	id      string
	gen     int
	formula string
}

type waitingDispatch struct {
	since    time.Time
	zone     string
	reported bool
}

// await notes that formula i's dispatch waits for an executor from since
// (a wait already noted keeps its start).
func (e *Engine) await(r *run, i int, since time.Time) {
	if e.Zones == nil {
		return
	}
	k := waitKey{r.rec.ID, r.rec.Generation, r.plan.Formulas[i].ID}
	if _, ok := e.waiting[k]; ok {
		return
	}
	if e.waiting == nil {
		e.waiting = map[waitKey]*waitingDispatch{}
	}
	e.waiting[k] = &waitingDispatch{since: since, zone: r.rec.Composition.Hosts[r.plan.Formulas[i].Server].Zone()}
}

// waitingAgain notes, for a run just loaded (a restarted planner), the
// dispatches still waiting for an executor, from now.
func (e *Engine) waitingAgain(r *run) {
	if e.Zones == nil || r.rec.Status.Terminal() || r.stopping() {
		return
	}
	now := e.now()
	for i := range r.plan.Formulas {
		if r.state.Formula(i) == dag.FormulaReady {
			e.await(r, i, now)
		}
	}
}

// CheckUnclaimed reports the dispatches no executor has taken within
// UnclaimedAfter (see above), each once.
func (e *Engine) CheckUnclaimed(ctx context.Context) {
	if e.Zones == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now, after := e.now(), e.unclaimedAfter()
	var due []waitKey
	for k, w := range e.waiting {
		if !w.reported && !now.Before(w.since.Add(after)) {
			due = append(due, k)
		}
	}
	slices.SortFunc(due, func(a, b waitKey) int {
		return strings.Compare(a.id+"|"+a.formula, b.id+"|"+b.formula)
	})
	zones := map[string]events.Takers{}
	for _, k := range due {
		err := e.unit(ctx, func() error { return e.unclaimed(ctx, k, zones, now, after) })
		if err != nil {
			e.Log.Warn("cannot tell whether an executor takes a dispatch; looking again", "workflow_id", k.id, "formula", k.formula, "err", err)
		}
	}
}

// unclaimed looks at one dispatch that has waited long enough.
func (e *Engine) unclaimed(ctx context.Context, k waitKey, zones map[string]events.Takers, now time.Time, after time.Duration) error {
	w := e.waiting[k]
	r, err := e.load(ctx, k.id)
	if err != nil {
		return err
	}
	i, ok := 0, false
	if r != nil {
		i, ok = r.plan.Index(k.formula)
	}
	if !ok || r.rec.Generation != k.gen || r.rec.Status.Terminal() || r.stopping() || r.state.Formula(i) != dag.FormulaReady {
		delete(e.waiting, k)
		return nil
	}
	t, err := e.takers(ctx, w.zone, zones)
	if err != nil {
		return err
	}
	if !t.Nobody() && t.Queued == 0 {
		w.since = now // an executor holds it, or is about to: look again later
		return nil
	}
	why := fmt.Sprintf("%s (its dispatch is unclaimed after %s)", t.Why(), after)
	ev := e.formulaEvent(r, i, dag.FormulaReady, "")
	ev.Error = why
	e.Out.Emit(r.formulaCtx(ctx, i), events.HostLifecycle(ev.Ref.Host), ev, e.msgID(r, k.formula, "unclaimed"))
	w.reported = true
	e.Log.Warn("dispatch unclaimed", "workflow_id", k.id, "formula", k.formula, "zone", w.zone, "why", why)
	return nil
}

// takers reads a zone's takers once per call of its caller (cache).
func (e *Engine) takers(ctx context.Context, zone string, cache map[string]events.Takers) (events.Takers, error) {
	if t, ok := cache[zone]; ok {
		return t, nil
	}
	t, err := e.Zones.Takers(ctx, zone)
	if err != nil {
		return t, err
	}
	cache[zone] = t
	return t, nil
}

// untaken says whether formula i's dispatch (its formula ready) is known
// to be in no executor's hands: no executor takes its zone's work now.
// why says so for people. When it cannot tell, it says no.
func (e *Engine) untaken(ctx context.Context, r *run, i int, cache map[string]events.Takers) (string, bool) {
	if e.Zones == nil || r.state.Formula(i) != dag.FormulaReady {
		return "", false
	}
	zone := r.rec.Composition.Hosts[r.plan.Formulas[i].Server].Zone()
	t, err := e.takers(ctx, zone, cache)
	if err != nil {
		e.Log.Warn("cannot tell whether an executor takes a dispatch: waiting for its outcome", "workflow_id", r.rec.ID, "formula", r.plan.Formulas[i].ID, "err", err)
		return "", false
	}
	if !t.Nobody() {
		return "", false
	}
	delete(e.waiting, waitKey{r.rec.ID, r.rec.Generation, r.plan.Formulas[i].ID})
	return t.Why(), true
}
