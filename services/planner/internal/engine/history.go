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
	entry := Record{ID: rec.ID, Name: rec.Name, Operation: rec.Operation, CreatedAt: rec.CreatedAt}
	if _, err := e.Workflows.Put(ctx, historyKey(rec.Name, rec.ID), entry, 0); err != nil && !errors.Is(err, events.ErrChanged) {
		return fmt.Errorf("list workflow %s among the runs of %s: %w", rec.ID, rec.Name, err)
	}
	return nil
}

// activated marks a retried workflow as the latest run of its composition
// from now (its entry's UpdatedAt): what it runs again is newer than what
// runs accepted after it ran (alreadyDone and prune read the runs in the
// order they were last started). An entry that cannot be updated is
// logged: the retry goes on.
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
		entry.UpdatedAt = now
		if _, err = e.Workflows.Put(ctx, key, entry, rev); !errors.Is(err, events.ErrChanged) {
			break
		}
	}
	if err != nil {
		e.Log.Error("the retried workflow is not marked the latest run of its composition: a submission may take an earlier run for a later one",
			"workflow_id", rec.ID, "err", err)
	}
}

// lastStarted is when a composition's run was last started: its entry's
// UpdatedAt (a retry), else its acceptance.
func lastStarted(entry Record) time.Time {
	if !entry.UpdatedAt.IsZero() {
		return entry.UpdatedAt
	}
	return entry.CreatedAt
}

// runsNewestFirst lists the runs of composition name, the one last started
// first (ties by id: UUIDv7, in the order accepted), and when each was last
// started. A run whose entry does not decode is taken as started now: read
// first, it is never passed over.
func (e *Engine) runsNewestFirst(ctx context.Context, name string) ([]string, map[string]time.Time, error) {
	entries, bad, err := e.Workflows.Entries(ctx, historyPrefix(name)+"*")
	if err != nil {
		return nil, nil, fmt.Errorf("read the runs of %s: %w", name, err)
	}
	started := make(map[string]time.Time, len(entries))
	for k, entry := range entries {
		started[strings.TrimPrefix(k, historyPrefix(name))] = lastStarted(entry)
	}
	for k := range bad {
		started[strings.TrimPrefix(k, historyPrefix(name))] = e.now()
	}
	runs := make([]string, 0, len(started))
	for id := range started {
		runs = append(runs, id)
	}
	slices.SortFunc(runs, func(a, b string) int {
		return cmp.Or(started[b].Compare(started[a]), strings.Compare(b, a))
	})
	return runs, started, nil
}

// verdict is what a run's record says of a node: done or not, and when
// the attempt that wrote it started (zero: a record written before
// records kept it).
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
			v.at = startedAt(dr)
		} else if nr, ok := recs[create]; ok && !(nr.NeverStarted && !nr.Status.Done()) {
			v = verdict{done: nr.Status.Done() && nr.SpecHash == w.spec, at: startedAt(nr)}
		} else {
			continue // that run did not reach it
		}
		if cur, ok := r.found[key]; !ok || v.at.After(cur.at) {
			r.found[key] = v
		}
	}
	return nil
}

func startedAt(r events.NodeRecord) time.Time {
	if r.StartedAt != nil {
		return *r.StartedAt
	}
	return time.Time{}
}

// decide takes as final each verdict found whose attempt started after
// next (the next run to read was last started then; zero: none is left),
// or that has no start to compare.
func decide(undecided map[string]wanted, found map[string]verdict, done map[string]bool, next time.Time) {
	for key, v := range found {
		if _, ok := undecided[key]; !ok || (!v.at.IsZero() && !next.IsZero() && !v.at.After(next)) {
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
// its acceptance or a retry, first); a node is decided by the record of
// it, on its host, whose attempt started last (a retry of an older run
// reads first but may have left the node as it was): done when that
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
	runs, started, err := e.runsNewestFirst(ctx, p.Workflow)
	if err != nil {
		return nil, err
	}

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
			if err := e.readRun(ctx, runRead{id: id, past: past, rec: &rec, undecided: undecided, found: found}); err != nil {
				return nil, err
			}
		}
		// A record found decides its node once no run still to read was
		// started after its attempt: a run is read before those last
		// started earlier (a retry may run an older run's node again
		// after a newer run's, or leave it as it was).
		var next time.Time
		if i+1 < len(runs) {
			next = started[runs[i+1]]
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
