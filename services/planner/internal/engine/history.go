package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// What a submission skips as already done comes only from records written
// under the planner's and the executors' own identities: the planner lists
// each create and delete it accepts among its composition's runs (in
// gantry_workflows, beside the workflow records), and the executors record
// what each node of a run did (gantry_nodes). The state-store's per-host
// projection (gantry_state) is not read: a stolen state-store credential
// changes what status, state and drift report, not what runs, and a
// damaged projection refuses no submission.

// workflowKeys is the KV filter of the workflow records in
// gantry_workflows: a workflow id is one token; the composition lists
// (historyKey) have three.
const workflowKeys = "*"

// historyKey is where gantry_workflows lists workflow id among the runs
// of composition name (a token: names are validated as such).
func historyKey(name, id string) string { return historyPrefix(name) + id }

func historyPrefix(name string) string { return "composition." + name + "." }

// remember lists an accepted create or delete among its composition's
// runs; a check changes nothing on the hosts and is not listed. Listing
// it again is not an error.
func (e *Engine) remember(ctx context.Context, rec *Record) error {
	if rec.Operation == dag.OpCheck {
		return nil
	}
	entry := Record{ID: rec.ID, Name: rec.Name, Operation: rec.Operation, CreatedAt: rec.CreatedAt, GenerationStarts: []time.Time{rec.CreatedAt}}
	if _, err := e.Workflows.Put(ctx, historyKey(rec.Name, rec.ID), entry, 0); err != nil && !errors.Is(err, events.ErrChanged) {
		return fmt.Errorf("list workflow %s among the runs of %s: %w", rec.ID, rec.Name, err)
	}
	return nil
}

// activated marks a retried workflow's generation as started now (its
// entry's GenerationStarts): what it runs again is newer than what runs
// accepted after it ran (alreadyDone and prune read the runs in the order
// they were last started). An entry that cannot be updated is logged: the
// retry goes on.
func (e *Engine) activated(ctx context.Context, rec *Record) {
	if rec.Operation == dag.OpCheck {
		return
	}
	key, now := historyKey(rec.Name, rec.ID), e.now()
	var err error
	for range 3 { // another replica may write it at once: read it again
		var entry Record
		var rev uint64
		if entry, rev, err = e.Workflows.Get(ctx, key); err != nil {
			break
		}
		entry.GenerationStarts = startsUpTo(entry, rec.Generation, now)
		if _, err = e.Workflows.Put(ctx, key, entry, rev); !errors.Is(err, events.ErrChanged) {
			break
		}
	}
	if err != nil {
		e.Log.Error("the retried workflow is not marked the latest run of its composition: a submission may take an earlier run for a later one",
			"workflow_id", rec.ID, "err", err)
	}
}

// startsUpTo is entry's generation starts with generation gen's at now
// (those missing before it taken as its last start).
func startsUpTo(entry Record, gen int, now time.Time) []time.Time {
	starts := slices.Clone(entry.GenerationStarts)
	for len(starts) < gen-1 {
		starts = append(starts, lastStarted(entry))
	}
	if len(starts) >= gen {
		starts[gen-1] = now
		return starts[:gen]
	}
	return append(starts, now)
}

// generationStart is when generation gen of the run of entry started: as
// the entry lists it; else its acceptance for the first, and its last start
// for a later one.
func generationStart(entry Record, gen int) time.Time {
	switch {
	case gen >= 1 && gen <= len(entry.GenerationStarts):
		return entry.GenerationStarts[gen-1]
	case gen <= 1:
		return entry.CreatedAt
	}
	return lastStarted(entry)
}

// lastStarted is when a composition's run was last started: its last
// generation's start, else (an entry written before they were kept) its
// acceptance.
func lastStarted(entry Record) time.Time {
	if n := len(entry.GenerationStarts); n > 0 {
		return entry.GenerationStarts[n-1]
	}
	return entry.CreatedAt
}

// history is a composition's runs as its history entries list them.
type history struct {
	runs    []string          // the one last started first (ties by id: UUIDv7, in the order accepted)
	entries map[string]Record // by run id
	bad     map[string]bool   // runs whose entry does not decode: taken as started now
	now     time.Time
}

// runsNewestFirst reads the history of composition name.
func (e *Engine) runsNewestFirst(ctx context.Context, name string) (*history, error) {
	entries, bad, err := e.Workflows.Entries(ctx, historyPrefix(name)+"*")
	if err != nil {
		return nil, fmt.Errorf("read the runs of %s: %w", name, err)
	}
	h := &history{entries: make(map[string]Record, len(entries)), bad: map[string]bool{}, now: e.now()}
	for k, entry := range entries {
		h.entries[strings.TrimPrefix(k, historyPrefix(name))] = entry
	}
	for k := range bad {
		h.bad[strings.TrimPrefix(k, historyPrefix(name))] = true
	}
	for id := range h.entries {
		h.runs = append(h.runs, id)
	}
	for id := range h.bad {
		h.runs = append(h.runs, id)
	}
	slices.SortFunc(h.runs, func(a, b string) int {
		return cmp.Or(h.lastStarted(b).Compare(h.lastStarted(a)), strings.Compare(b, a))
	})
	return h, nil
}

func (h *history) lastStarted(id string) time.Time {
	if h.bad[id] {
		return h.now
	}
	return lastStarted(h.entries[id])
}

// recordTime is how recent a record of run id is: the start of the
// generation that wrote it (now when the run's entry does not decode).
func (h *history) recordTime(id string, gen int) time.Time {
	if h.bad[id] {
		return h.now
	}
	return generationStart(h.entries[id], gen)
}

// verdict is what a run's record says of a node: done or not, and how
// recent it is (the start of the generation that wrote it).
type verdict struct {
	done bool
	at   time.Time
}

// runRead is one past run read for alreadyDone: the nodes still undecided
// and the latest verdict found of each.
type runRead struct {
	id, past  string // the submission, the run read
	rec       *Record
	undecided map[string]wanted
	found     map[string]verdict
	hist      *history
}

// readRun reads one past run's records of the nodes still undecided. A
// record that does not decode decides its node at once: not done.
func (e *Engine) readRun(ctx context.Context, r runRead) error {
	servers := make(map[string]string, len(r.rec.Composition.Formulas))
	for _, f := range r.rec.Composition.Formulas {
		servers[f.ID] = f.Server
	}
	recs, bad, err := e.Nodes.Entries(ctx, r.past+".>")
	if err != nil {
		return fmt.Errorf("read the node records of run %s of %s: %w", r.past, r.rec.Name, err)
	}
	for key, w := range r.undecided {
		if servers[w.formula] != w.server {
			continue // not on this host in that run: another record
		}
		create, del := events.NodeKey(r.past, dag.OpCreate, w.formula, w.node), events.NodeKey(r.past, dag.OpDelete, w.formula, w.node)
		if why := cmp.Or(bad[del], bad[create]); why != nil {
			e.ignored(events.BucketNodes, "node record does not decode; the node is not skipped",
				"workflow_id", r.past, "host", w.server, "formula", w.formula, "node", w.node, "submission", r.id, "reason", why)
			delete(r.undecided, key)
			delete(r.found, key)
			continue
		}
		var v verdict
		if dr, ok := recs[del]; ok { // deleted, or a delete started on it
			v.at = r.hist.recordTime(r.past, dr.Generation)
		} else if nr, ok := recs[create]; ok && !(nr.NeverStarted && !nr.Status.Done()) {
			v = verdict{done: nr.Status.Done() && nr.SpecHash == w.spec, at: r.hist.recordTime(r.past, nr.Generation)}
		} else {
			continue // that run did not reach it
		}
		if r.hist.bad[r.past] {
			v.done = false // how recent it is is unknown: never a reason to skip
		}
		if cur, ok := r.found[key]; !ok || v.at.After(cur.at) {
			r.found[key] = v
		}
	}
	return nil
}

// decide takes as final each verdict found more recent than next (the
// next run to read was last started then; zero: none is left).
func decide(undecided map[string]wanted, found map[string]verdict, done map[string]bool, next time.Time) {
	for key, v := range found {
		if _, ok := undecided[key]; !ok || (!next.IsZero() && !v.at.After(next)) {
			continue
		}
		if v.done {
			done[key] = true
		}
		delete(undecided, key)
	}
}

// listed is the set of workflow ids listed among their composition's runs.
func (e *Engine) listed(ctx context.Context) (map[string]bool, error) {
	keys, err := e.Workflows.Keys(ctx, historyPrefix("*")+"*")
	if err != nil {
		return nil, fmt.Errorf("list the runs of compositions: %w", err)
	}
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k[strings.LastIndexByte(k, '.')+1:]] = true
	}
	return m, nil
}

// wanted is a node of the plan being accepted: where it runs and with
// which spec.
type wanted struct {
	formula, node, server, spec string
}

// alreadyDone lists the nodes of plan p ("formula/node") that a create of
// the same composition completed on the same host with the same spec hash
// (succeeded, or skipped), with nothing run on them since: the rule of the
// per-host projection's in_place, decided from the executors' records.
//
// The composition's runs are read newest first (the one last started, by
// its acceptance or a retry, first); a node is decided by the most recent
// record of it on its host, a record being as recent as the start of the
// generation that wrote it (on the planner's clock: a retry of an older
// run is read first, but what it left as it was is as old as before): done when that
// run's create record is succeeded or skipped with the same spec hash and
// no delete (a rollback) of it is recorded, not done otherwise. A run
// that did not reach the node (blocked, cancelled, not selected, not in
// it, or on another host) leaves it to older runs; the reading stops once
// every node is decided, so a composition whose last run reached every
// node costs one read of that run's record and one of its node records.
//
// A record that does not decode is never a reason to skip, nor to refuse
// the submission: the nodes it could have decided run, and it is reported
// (log and gantry_planner_records_ignored_total). A store that cannot be
// read fails the submission: skipping on a guess would be a lie either
// way.
func (e *Engine) alreadyDone(ctx context.Context, id string, p *dag.Plan) ([]string, error) {
	hist, err := e.runsNewestFirst(ctx, p.Workflow)
	if err != nil {
		return nil, err
	}
	runs := hist.runs

	undecided := map[string]wanted{}
	for i := range p.Formulas {
		pf := &p.Formulas[i]
		for j := range pf.Nodes {
			undecided[pf.ID+"/"+pf.Nodes[j].Name] = wanted{formula: pf.ID, node: pf.Nodes[j].Name, server: pf.Server, spec: pf.Nodes[j].SpecHash}
		}
	}
	done := map[string]bool{}
	found := map[string]verdict{} // by "formula/node": the latest record found so far
	for i, past := range runs {
		if len(undecided) == 0 {
			break
		}
		rec, _, err := e.Workflows.Get(ctx, past)
		switch {
		case errors.Is(err, events.ErrNoRecord): // listed, then not accepted
			continue
		case errors.Is(err, events.ErrBadRecord):
			// What it ran is unknown: nothing older can be trusted for
			// the nodes still undecided. They run.
			e.ignored(events.BucketWorkflows, "workflow record does not decode; the nodes not decided by newer runs are not skipped",
				"workflow_id", past, "submission", id, "undecided", len(undecided), "reason", err)
			return inPlanOrder(p, done), nil
		case err != nil:
			return nil, fmt.Errorf("read run %s of %s: %w", past, p.Workflow, err)
		}
		if rec.Name == p.Workflow && rec.Operation != dag.OpCheck && rec.Composition != nil {
			if err := e.readRun(ctx, runRead{id: id, past: past, rec: &rec, undecided: undecided, found: found, hist: hist}); err != nil {
				return nil, err
			}
		}
		// A record found decides its node once no run still to read was
		// started (accepted or retried) after the generation that wrote
		// it: a run is read before those last started earlier (a retry
		// may run an older run's node again after a newer run's, or leave
		// it as it was).
		var next time.Time
		if i+1 < len(runs) {
			next = hist.lastStarted(runs[i+1])
		}
		decide(undecided, found, done, next)
	}
	decide(undecided, found, done, time.Time{})
	return inPlanOrder(p, done), nil
}

// inPlanOrder lists the nodes of p in done, in plan order.
func inPlanOrder(p *dag.Plan, done map[string]bool) []string {
	var out []string
	for i := range p.Formulas {
		pf := &p.Formulas[i]
		for j := range pf.Nodes {
			if k := pf.ID + "/" + pf.Nodes[j].Name; done[k] {
				out = append(out, k)
			}
		}
	}
	return out
}
