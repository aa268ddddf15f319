package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// load returns the run of a workflow from the cache, else from KV. It
// returns nil, nil for a workflow that does not exist.
func (e *Engine) load(ctx context.Context, id string) (*run, error) {
	if r, ok := e.cache[id]; ok {
		return r, nil
	}
	rec := &Record{}
	recRev, err := getJSON(ctx, e.Workflows, id, rec)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load workflow %s: %w", id, err)
	}
	r := &run{rec: rec, recRev: recRev, plan: rec.plan(), done: toSet(rec.AlreadyDone)}
	r.state = r.plan.NewRunState()
	r.snapRev, err = getJSON(ctx, e.Runs, id, &r.snap)
	if err != nil {
		return nil, fmt.Errorf("load run %s: %w", id, err)
	}
	if len(r.snap.Formulas) != len(r.plan.Formulas) {
		return nil, fmt.Errorf("run %s: snapshot has %d formulas, plan %d", id, len(r.snap.Formulas), len(r.plan.Formulas))
	}
	for i := 0; i < len(r.snap.Formulas); i++ {
		st, ok := letterStates[r.snap.Formulas[i]]
		if !ok {
			return nil, fmt.Errorf("run %s: bad state %q in snapshot", id, r.snap.Formulas[i])
		}
		b, blocked := r.snap.Blockers[i]
		if !blocked {
			b = -1
		}
		if err := r.state.SetFormula(i, st, b); err != nil {
			return nil, fmt.Errorf("run %s: %w", id, err)
		}
	}
	e.cacheRun(r)
	return r, nil
}

func (e *Engine) cacheRun(r *run) {
	if e.cache == nil {
		e.cache = map[string]*run{}
	}
	e.cache[r.rec.ID] = r
}

// captureSnapshot copies the run state into r.snap.
func (r *run) captureSnapshot() {
	n := len(r.plan.Formulas)
	r.snap.Generation = r.rec.Generation
	b := make([]byte, n)
	r.snap.Blockers = nil
	for i := 0; i < n; i++ {
		b[i] = stateLetters[r.state.Formula(i)]
		if k := r.state.Blocker(i); k >= 0 && r.state.Formula(i) == dag.FormulaBlocked {
			if r.snap.Blockers == nil {
				r.snap.Blockers = map[int]int{}
			}
			r.snap.Blockers[i] = k
		}
	}
	r.snap.Formulas = string(b)
}

// saveSnapshot writes the run state with a compare-and-set. If another
// writer got there first, the cached run is dropped and the event will be
// redelivered against the fresh state.
func (e *Engine) saveSnapshot(ctx context.Context, r *run) error {
	r.captureSnapshot()
	rev, err := putJSON(ctx, e.Runs, r.rec.ID, r.snap, r.snapRev)
	if err != nil {
		delete(e.cache, r.rec.ID)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %w", errStale, err)
		}
		return fmt.Errorf("save run %s: %w", r.rec.ID, err)
	}
	r.snapRev = rev
	return nil
}

func (e *Engine) saveRecord(ctx context.Context, r *run) error {
	r.rec.UpdatedAt = time.Now().UTC()
	rev, err := putJSON(ctx, e.Workflows, r.rec.ID, r.rec, r.recRev)
	if err != nil {
		delete(e.cache, r.rec.ID)
		return fmt.Errorf("save workflow %s: %w", r.rec.ID, err)
	}
	r.recRev = rev
	return nil
}

// alreadyDone lists the nodes the per-host projection records as succeeded
// (by a create) with the same spec hash. It lists each host's keys once and
// reads only the nodes recorded there, so a fresh fleet costs one listing
// per host rather than a read per node.
func (e *Engine) alreadyDone(ctx context.Context, p *dag.Plan) []string {
	if e.State == nil {
		return nil
	}
	recorded := map[string]bool{}
	listed := map[string]bool{}
	var out []string
	for i := range p.Formulas {
		pf := &p.Formulas[i]
		if !listed[pf.Server] {
			listed[pf.Server] = true
			if l, err := e.State.ListKeysFiltered(ctx, events.HostNodePrefix(pf.Server)+">"); err == nil {
				for k := range l.Keys() {
					recorded[k] = true
				}
			}
		}
		for j := range pf.Nodes {
			pn := &pf.Nodes[j]
			key := events.HostNodeKey(pf.Server, pf.ID, pn.Name)
			if !recorded[key] {
				continue
			}
			ent, err := e.State.Get(ctx, key)
			if err != nil {
				continue
			}
			var hn events.HostNode
			if json.Unmarshal(ent.Value(), &hn) != nil {
				continue
			}
			if hn.Status.Done() && hn.Operation == dag.OpCreate && hn.SpecHash == pn.SpecHash {
				out = append(out, pf.ID+"/"+pn.Name)
			}
		}
	}
	return out
}
