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

// Pruning finished workflows (gantry prune, and the retention setting).
//
// The planner chooses: finished workflows (succeeded, failed, cancelled)
// older than the rule's age and/or beyond the newest Keep finished runs
// of their composition, less every run that is the latest finished run of
// its composition to have touched a node on its host (an executor record
// of a create or delete of it): what a submission skips as already done
// is decided from those (alreadyDone), so they stay whole. Accepted,
// running and paused workflows are never chosen, and neither is anything
// of theirs: every record, document, event and line removed is the chosen
// workflow's own.
//
// Then, for each chosen workflow: its record is marked (PrunedAt, a
// compare-and-set at the revision read, so a retry that made it run again
// in between wins and it is left alone); its events are deleted from
// GANTRY_EVENTS; the pruned event is published (the executors remove its
// node records and output lines, the state-store its documents); and last
// the planner removes its run snapshot, its listing among the
// composition's runs and its record. A prune that stops half way leaves
// the record marked, and the next prune finishes it.

// PruneRule says which finished workflows a prune removes.
type PruneRule struct {
	// OlderThan: ended more than this long ago (0: any age).
	OlderThan time.Duration
	// Keep: the newest Keep finished runs of each composition stay
	// (HasKeep false: no such rule). With OlderThan too, a run goes only
	// when both rules let it.
	Keep    int
	HasKeep bool
	DryRun  bool
	// Reason is written in each pruned event ("gantry prune --keep 2").
	Reason string
	// By is the operator who asked (nil: the retention setting).
	By *events.Principal
}

// String says the rule as a person would.
func (r PruneRule) String() string {
	var parts []string
	if r.OlderThan > 0 {
		parts = append(parts, "ended more than "+r.OlderThan.String()+" ago")
	}
	if r.HasKeep {
		parts = append(parts, fmt.Sprintf("not among the newest %d finished runs of its composition", r.Keep))
	}
	return strings.Join(parts, " and ")
}

// candidate is a finished workflow as the selection sees it.
type candidate struct {
	id, name string
	op       dag.Operation
	status   dag.WorkflowState
	created  time.Time
	ended    time.Time
	started  time.Time // when it was last started: its acceptance or a retry (lastStarted)
	pruning  bool      // a prune already chose it
	// touched are the nodes ("host/formula/node") it recorded a create or
	// delete of, with when the attempt of the last record started (zero:
	// not kept in the record).
	touched map[string]time.Time
	rev     uint64
}

// kept is a candidate the rule chose that stays, and why.
type kept struct {
	c     *candidate
	nodes int
}

// choose applies rule to the finished workflows at now: the workflows to
// prune (oldest first) and those the rule chose that stay, being the
// latest finished run of their composition to have touched some node.
// A workflow a prune already chose (pruning) goes whatever the rule.
func choose(finished []*candidate, rule PruneRule, now time.Time) (prune []*candidate, keep []kept) {
	byName := map[string][]*candidate{}
	for _, c := range finished {
		byName[c.name] = append(byName[c.name], c)
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		runs := byName[name]
		// Newest first: the one last started (accepted or retried) first,
		// as alreadyDone reads them (ties by id: UUIDv7, in the order
		// accepted).
		slices.SortFunc(runs, func(a, b *candidate) int {
			return cmp.Or(b.started.Compare(a.started), strings.Compare(b.id, a.id))
		})
		latest := latestOfEachNode(runs)
		newer := 0 // finished runs newer than c
		for _, c := range runs {
			chosen := c.pruning || ((rule.OlderThan <= 0 || now.Sub(c.ended) > rule.OlderThan) && (!rule.HasKeep || newer >= rule.Keep))
			if !c.pruning {
				newer++
			}
			switch {
			case !chosen:
			case latest[c] > 0:
				keep = append(keep, kept{c: c, nodes: latest[c]})
			default:
				prune = append(prune, c)
			}
		}
	}
	slices.SortFunc(prune, func(a, b *candidate) int { return strings.Compare(a.id, b.id) })
	slices.SortFunc(keep, func(a, b kept) int { return strings.Compare(a.c.id, b.c.id) })
	return prune, keep
}

// Prune removes the finished workflows rule chooses (nothing in a dry
// run) and says what went.
func (e *Engine) Prune(ctx context.Context, rule PruneRule) (*events.PruneReply, error) {
	reply, err := e.prune(ctx, rule)
	if e.healed(ctx, err) {
		return e.prune(ctx, rule)
	}
	return reply, err
}

func (e *Engine) prune(ctx context.Context, rule PruneRule) (*events.PruneReply, error) {
	now := e.now()
	finished, unfinished, err := e.finished(ctx)
	if err != nil {
		return nil, err
	}
	prune, keep := choose(finished, rule, now)
	reply := &events.PruneReply{DryRun: rule.DryRun, Unfinished: unfinished, Removed: map[string]events.StoreSize{}, Pruned: []events.PrunedWorkflow{}}
	for _, k := range keep {
		reply.Kept = append(reply.Kept, events.KeptWorkflow{PrunedWorkflow: k.c.summary(), Nodes: k.nodes,
			Reason: fmt.Sprintf("the latest finished run of %s on %d node(s): what a submission skips as already done is decided from it", k.c.name, k.nodes)})
	}
	if !rule.DryRun {
		prune = e.claim(ctx, prune, now, reply)
	}
	if len(prune) == 0 {
		return reply, nil
	}
	ids := make(map[string]bool, len(prune))
	var spans []events.Span
	for _, c := range prune {
		ids[c.id] = true
		spans = append(spans, events.WorkflowSpan(c.created, c.ended))
		reply.Pruned = append(reply.Pruned, c.summary())
		if err := e.measure(ctx, c, reply); err != nil {
			return nil, err
		}
	}
	if e.Events != nil {
		sz, err := e.Events.RemoveWorkflows(ctx, ids, spans, rule.DryRun)
		reply.Removed[events.StreamEvents] = sz
		if err != nil {
			return nil, fmt.Errorf("remove the events of %d workflow(s): %w", len(ids), err)
		}
	}
	if rule.DryRun {
		return reply, nil
	}
	if err := e.announcePruned(ctx, prune, rule); err != nil {
		return nil, err
	}
	for _, c := range prune {
		if err := e.removeRecords(ctx, c); err != nil {
			reply.Errors = append(reply.Errors, fmt.Sprintf("%s: %v (the next prune finishes it)", c.id, err))
		}
	}
	e.Log.Info("workflows pruned", "pruned", len(prune), "kept_as_latest", len(keep), "rule", rule.String(), "by", byString(rule.By))
	return reply, nil
}

func byString(by *events.Principal) string {
	if by == nil {
		return "retention"
	}
	return by.String()
}

func (c *candidate) summary() events.PrunedWorkflow {
	return events.PrunedWorkflow{WorkflowID: c.id, Workflow: c.name, Operation: c.op, Status: c.status, CreatedAt: c.created, EndedAt: c.ended}
}

// latestOfEachNode counts, for each of runs (newest first), the nodes it is
// the latest run to have touched: the one whose record's attempt started
// last (as alreadyDone decides), the newest when the records do not say.
func latestOfEachNode(runs []*candidate) map[*candidate]int {
	best := map[string]*candidate{}
	for _, c := range runs {
		if c.pruning || c.op == dag.OpCheck {
			continue
		}
		for hn, at := range c.touched {
			if b, ok := best[hn]; !ok || at.After(b.touched[hn]) {
				best[hn] = c
			}
		}
	}
	latest := map[*candidate]int{}
	for _, c := range best {
		latest[c]++
	}
	return latest
}

// finished reads every finished workflow with what it touched, and counts
// the others. A record that does not decode is left alone: whether it
// ended is unknown.
func (e *Engine) finished(ctx context.Context) ([]*candidate, int, error) {
	ids, err := e.Workflows.Keys(ctx, workflowKeys)
	if err != nil {
		return nil, 0, fmt.Errorf("list workflows: %w", err)
	}
	hist, badHist, err := e.Workflows.Entries(ctx, historyPrefix("*")+"*")
	if err != nil {
		return nil, 0, fmt.Errorf("read the runs of compositions: %w", err)
	}
	now := e.now()
	var out []*candidate
	unfinished := 0
	for _, id := range ids {
		rec, rev, err := e.Workflows.Get(ctx, id)
		switch {
		case errors.Is(err, events.ErrNoRecord):
			continue
		case errors.Is(err, events.ErrBadRecord):
			e.ignored(events.BucketWorkflows, "workflow record does not decode; not pruned", "workflow_id", id, "reason", err)
			continue
		case err != nil:
			return nil, 0, fmt.Errorf("read workflow %s: %w", id, err)
		}
		if !rec.Status.Terminal() {
			unfinished++
			continue
		}
		// As alreadyDone reads the run: a run whose entry does not decode
		// as started now, its records as recent as that.
		h := &history{entries: map[string]Record{id: {CreatedAt: rec.CreatedAt}}, bad: map[string]bool{}, now: now}
		if entry, ok := hist[historyKey(rec.Name, id)]; ok {
			h.entries[id] = entry
		} else if badHist[historyKey(rec.Name, id)] != nil {
			h.bad[id] = true
		}
		c := &candidate{id: id, name: rec.Name, op: rec.Operation, status: rec.Status, created: rec.CreatedAt, ended: rec.UpdatedAt,
			pruning: rec.PrunedAt != nil, rev: rev, started: h.lastStarted(id)}
		if c.op != dag.OpCheck && !c.pruning {
			if c.touched, err = e.nodesTouched(ctx, &rec, h); err != nil {
				return nil, 0, err
			}
		}
		out = append(out, c)
	}
	return out, unfinished, nil
}

// nodesTouched lists the nodes ("host/formula/node") whose create or
// delete a workflow's executors recorded, with how recent its record is
// (as alreadyDone reads it, h): the nodes it may decide for a later
// submission. A record of an attempt that started nothing on its host does
// not decide its node (alreadyDone reads past it); one that does not
// decode does (the node runs), as recent as the run's last start.
func (e *Engine) nodesTouched(ctx context.Context, rec *Record, h *history) (map[string]time.Time, error) {
	recs, bad, err := e.Nodes.Entries(ctx, rec.ID+".>")
	if err != nil {
		return nil, fmt.Errorf("read the node records of %s: %w", rec.ID, err)
	}
	keys := make(map[string]time.Time, len(recs)+len(bad))
	for k, r := range recs {
		if !(r.NeverStarted && !r.Status.Done()) {
			keys[k] = h.recordTime(rec.ID, r.Generation)
		}
	}
	for k := range bad {
		keys[k] = h.lastStarted(rec.ID)
	}
	servers := map[string]string{}
	for _, c := range []*dag.Composition{rec.Composition, rec.Rollback} {
		if c == nil {
			continue
		}
		for _, f := range c.Formulas {
			servers[f.ID] = f.Server
		}
	}
	out := map[string]time.Time{}
	for k, at := range keys {
		parts := strings.SplitN(k, ".", 4) // <id>.<operation>.<formula>.<node>
		if len(parts) != 4 || (parts[1] != string(dag.OpCreate) && parts[1] != string(dag.OpDelete)) {
			continue
		}
		hn := servers[parts[2]] + "/" + parts[2] + "/" + parts[3]
		if prev, ok := out[hn]; !ok || at.After(prev) {
			out[hn] = at
		}
	}
	return out, nil
}

// claim marks each chosen workflow's record as being pruned, at the
// revision read: one that changed since (a retry made it run again, or
// another planner is pruning it) is left to the next prune. It returns
// the workflows claimed.
func (e *Engine) claim(ctx context.Context, prune []*candidate, now time.Time, reply *events.PruneReply) []*candidate {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*candidate
	for _, c := range prune {
		delete(e.cache, c.id)
		if c.pruning {
			out = append(out, c)
			continue
		}
		rec, rev, err := e.Workflows.Get(ctx, c.id)
		if err == nil && (rev != c.rev || !rec.Status.Terminal()) {
			err = fmt.Errorf("%w: it changed since it was chosen", events.ErrChanged)
		}
		if err == nil {
			rec.PrunedAt = &now
			rec.Announce = nil // its events are removed: none is published again
			c.rev, err = e.Workflows.Put(ctx, c.id, rec, rev)
		}
		if err != nil {
			reply.Errors = append(reply.Errors, fmt.Sprintf("%s: not pruned: %v", c.id, err))
			continue
		}
		out = append(out, c)
	}
	return out
}

// measure adds what pruning c removes from the planner's buckets and the
// executors' node records to reply.
func (e *Engine) measure(ctx context.Context, c *candidate, reply *events.PruneReply) error {
	add := func(store string, sz events.StoreSize) {
		t := reply.Removed[store]
		t.Messages += sz.Messages
		t.Bytes += sz.Bytes
		reply.Removed[store] = t
	}
	for _, key := range []string{c.id, historyKey(c.name, c.id)} {
		sz, err := e.Workflows.Size(ctx, key)
		if err != nil {
			return err
		}
		add(events.BucketWorkflows, sz)
	}
	sz, err := e.Runs.Size(ctx, c.id)
	if err != nil {
		return err
	}
	add(events.BucketRuns, sz)
	if sz, err = e.Nodes.Size(ctx, c.id+".>"); err != nil {
		return err
	}
	add(events.BucketNodes, sz)
	if rec, _, err := e.Workflows.Get(ctx, c.id); err == nil {
		reply.Documents += documents(&rec)
	}
	return nil
}

// documents counts the state-store's documents of a workflow: its
// summary, one per formula and one per node (of its rollback too).
func documents(rec *Record) int {
	n := 1
	seen := map[string]bool{}
	for _, c := range []*dag.Composition{rec.Composition, rec.Rollback} {
		if c == nil {
			continue
		}
		for _, f := range c.Formulas {
			if !seen[f.ID] {
				n++
				seen[f.ID] = true
			}
			for _, nd := range f.Nodes {
				if !seen[f.ID+"/"+nd.Name] {
					n++
					seen[f.ID+"/"+nd.Name] = true
				}
			}
		}
	}
	return n
}

// announcePruned publishes the pruned events and waits until they are
// stored. It holds the engine as a unit of work does: the outbox is the
// engine's, and a flush outside a unit would store (or fail) events a
// unit in progress emitted, which that unit's own flush then would not
// see, so it would record decisions whose events were never stored.
func (e *Engine) announcePruned(ctx context.Context, prune []*candidate, rule PruneRule) error {
	if err := e.lockFor(ctx); err != nil {
		return err
	}
	defer e.mu.Unlock()
	for _, c := range prune {
		e.publishPruned(ctx, c, rule)
	}
	if err := e.Out.Flush(ctx); err != nil {
		return fmt.Errorf("announce the pruned workflows: %w", err)
	}
	return nil
}

// publishPruned announces that c is pruned.
func (e *Engine) publishPruned(ctx context.Context, c *candidate, rule PruneRule) {
	ev := &events.WorkflowPruned{Ref: events.Ref{WorkflowID: c.id, Workflow: c.name, Operation: c.op},
		FinalStatus: c.status, CreatedAt: c.created, EndedAt: c.ended, Reason: rule.Reason, RequestedBy: rule.By}
	e.Out.Emit(ctx, events.WorkflowLifecycle(c.id), ev, events.PrunedMsgID(c.id))
}

// removeRecords removes the planner's own records of a pruned workflow,
// its record last: while it is there, the next prune can finish the rest.
func (e *Engine) removeRecords(ctx context.Context, c *candidate) error {
	if _, err := e.Runs.Remove(ctx, c.id); err != nil {
		return err
	}
	if _, err := e.Workflows.Remove(ctx, historyKey(c.name, c.id)); err != nil {
		return err
	}
	_, err := e.Workflows.Remove(ctx, c.id)
	return err
}
