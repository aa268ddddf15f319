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
// first (ties, and entries that do not decode, by id: UUIDv7, in the order
// accepted).
func (e *Engine) runsNewestFirst(ctx context.Context, name string) ([]string, error) {
	entries, bad, err := e.Workflows.Entries(ctx, historyPrefix(name)+"*")
	if err != nil {
		return nil, fmt.Errorf("read the runs of %s: %w", name, err)
	}
	started := make(map[string]time.Time, len(entries))
	for k, entry := range entries {
		started[strings.TrimPrefix(k, historyPrefix(name))] = lastStarted(entry)
	}
	for k := range bad {
		started[strings.TrimPrefix(k, historyPrefix(name))] = time.Time{}
	}
	runs := make([]string, 0, len(started))
	for id := range started {
		runs = append(runs, id)
	}
	slices.SortFunc(runs, func(a, b string) int {
		return cmp.Or(started[b].Compare(started[a]), strings.Compare(b, a))
	})
	return runs, nil
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
// its acceptance or a retry, first); a node is decided by the newest run
// whose executor record names it on its host: done when that
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
	runs, err := e.runsNewestFirst(ctx, p.Workflow)
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
	for _, past := range runs {
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
		if rec.Name != p.Workflow || rec.Operation == dag.OpCheck || rec.Composition == nil {
			continue
		}
		servers := make(map[string]string, len(rec.Composition.Formulas))
		for _, f := range rec.Composition.Formulas {
			servers[f.ID] = f.Server
		}
		recs, bad, err := e.Nodes.Entries(ctx, past+".>")
		if err != nil {
			return nil, fmt.Errorf("read the node records of run %s of %s: %w", past, p.Workflow, err)
		}
		for key, w := range undecided {
			if servers[w.formula] != w.server {
				continue // not on this host in that run: another record
			}
			create, del := events.NodeKey(past, dag.OpCreate, w.formula, w.node), events.NodeKey(past, dag.OpDelete, w.formula, w.node)
			if why := cmp.Or(bad[del], bad[create]); why != nil {
				e.ignored(events.BucketNodes, "node record does not decode; the node is not skipped",
					"workflow_id", past, "host", w.server, "formula", w.formula, "node", w.node, "submission", id, "reason", why)
				delete(undecided, key)
				continue
			}
			if _, ok := recs[del]; ok { // deleted, or a delete started on it
				delete(undecided, key)
				continue
			}
			nr, ok := recs[create]
			if !ok || (nr.NeverStarted && !nr.Status.Done()) {
				continue // that run did not reach it
			}
			if nr.Status.Done() && nr.SpecHash == w.spec {
				done[key] = true
			}
			delete(undecided, key)
		}
	}
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
