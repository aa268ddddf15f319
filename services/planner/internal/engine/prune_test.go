package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Which finished runs a rule chooses, and which of those stay as the
// latest run to have touched a node on its host.
func TestPruneChooses(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	// run is a finished run of composition "c" (unless name says
	// otherwise), ended ago, that recorded the host nodes given.
	type run struct {
		id      string
		name    string
		op      dag.Operation
		ago     time.Duration
		nodes   []string
		pruning bool
		retried time.Duration // ago, when it was retried (0: never)
		reran   []string      // the nodes the retry ran again
		ranAgo  time.Duration // when its nodes first ran (0: half an hour before it ended)
	}
	r := func(id string, ago time.Duration, nodes ...string) run {
		return run{id: id, name: "c", op: dag.OpCreate, ago: ago, nodes: nodes}
	}
	cases := map[string]struct {
		runs  []run
		rule  PruneRule
		prune string // ids, oldest first
		kept  string
	}{
		"older than: only the old go": {
			runs: []run{r("1", 40*day), r("2", 31*day), r("3", 29*day), r("4", time.Hour)},
			rule: PruneRule{OlderThan: 30 * day}, prune: "1 2",
		},
		"keep: the newest N of each composition stay": {
			runs: []run{r("1", 3*day), r("2", 2*day), r("3", day), {id: "4", name: "d", op: dag.OpCreate, ago: 5 * day}},
			rule: PruneRule{Keep: 2, HasKeep: true}, prune: "1",
		},
		"keep 0: every run may go": {
			runs: []run{r("1", 3*day), r("2", 2*day)},
			rule: PruneRule{Keep: 0, HasKeep: true}, prune: "1 2",
		},
		"both: old and beyond the newest N": {
			runs: []run{r("1", 40*day), r("2", 35*day), r("3", 31*day), r("4", day)},
			rule: PruneRule{OlderThan: 30 * day, Keep: 2, HasKeep: true}, prune: "1 2",
		},
		"both: young runs beyond N stay": {
			runs: []run{r("1", 3*day), r("2", 2*day), r("3", day)},
			rule: PruneRule{OlderThan: 30 * day, Keep: 1, HasKeep: true},
		},
		"the latest run to have touched a node stays": {
			runs: []run{r("1", 9*day, "h1/a/x", "h1/b/y"), r("2", 8*day, "h1/a/x"), r("3", 7*day, "h1/a/x")},
			rule: PruneRule{Keep: 1, HasKeep: true}, prune: "2", kept: "1",
		},
		"the latest per host: the same node on two hosts": {
			runs: []run{r("1", 9*day, "h1/a/x"), r("2", 8*day, "h2/a/x"), r("3", 7*day, "h2/a/x")},
			rule: PruneRule{Keep: 0, HasKeep: true}, prune: "2", kept: "1 3",
		},
		"a delete touches what it deleted": {
			runs: []run{r("1", 9*day, "h1/a/x"), {id: "2", name: "c", op: dag.OpDelete, ago: 8 * day, nodes: []string{"h1/a/x"}}},
			rule: PruneRule{Keep: 0, HasKeep: true}, prune: "1", kept: "2",
		},
		"a check decides nothing": {
			runs: []run{r("1", 9*day, "h1/a/x"), {id: "2", name: "c", op: dag.OpCheck, ago: 8 * day, nodes: []string{"h1/a/x"}}},
			rule: PruneRule{Keep: 0, HasKeep: true}, prune: "2", kept: "1",
		},
		"compositions are apart": {
			runs: []run{r("1", 9*day, "h1/a/x"), {id: "2", name: "d", op: dag.OpCreate, ago: 8 * day, nodes: []string{"h1/a/x"}}},
			rule: PruneRule{Keep: 0, HasKeep: true}, kept: "1 2",
		},
		"a run retried after a newer one ran is the latest to have touched the node": {
			runs: []run{{id: "1", name: "c", op: dag.OpCreate, ago: day, nodes: []string{"h1/a/x"}, retried: day + time.Hour, reran: []string{"h1/a/x"}}, r("2", 8*day, "h1/a/x")},
			rule: PruneRule{Keep: 0, HasKeep: true}, prune: "2", kept: "1",
		},
		"a retry that did not run the node again leaves the newer run the latest": {
			runs: []run{{id: "1", name: "c", op: dag.OpCreate, ago: day, nodes: []string{"h1/a/x", "h1/b/y"}, retried: day + time.Hour, reran: []string{"h1/b/y"}, ranAgo: 9 * day}, r("2", 8*day, "h1/a/x")},
			rule: PruneRule{Keep: 0, HasKeep: true}, kept: "1 2",
		},
		"one a prune already chose goes whatever the rule": {
			runs: []run{r("1", time.Hour, "h1/a/x"), {id: "2", name: "c", op: dag.OpCreate, ago: time.Minute, nodes: []string{"h1/a/x"}, pruning: true}},
			rule: PruneRule{OlderThan: 30 * day}, prune: "2",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var finished []*candidate
			for _, r := range tc.runs {
				c := &candidate{id: r.id, name: r.name, op: r.op, status: dag.WorkflowSucceeded,
					ended: now.Add(-r.ago), touched: map[string]time.Time{}, pruning: r.pruning}
				c.started = now.Add(-r.ago - time.Hour) // accepted an hour before it ended
				if r.retried > 0 {
					c.started = now.Add(-r.retried)
				}
				// Its nodes ran half an hour before it ended (the first
				// time; what its retry ran again, a minute after the retry).
				ran := cmp.Or(r.ranAgo, r.ago+30*time.Minute)
				for _, hn := range r.nodes {
					c.touched[hn] = now.Add(-ran)
					if slices.Contains(r.reran, hn) {
						c.touched[hn] = now.Add(-r.retried + time.Minute)
					}
				}
				finished = append(finished, c)
			}
			prune, kept := choose(finished, tc.rule, now)
			var got, gotKept []string
			for _, c := range prune {
				got = append(got, c.id)
			}
			for _, k := range kept {
				gotKept = append(gotKept, k.c.id)
			}
			if strings.Join(got, " ") != tc.prune || strings.Join(gotKept, " ") != tc.kept {
				t.Errorf("prune %q kept %q, want %q and %q", got, gotKept, tc.prune, tc.kept)
			}
		})
	}
}

// fakeEvents is the event stream: it records what it was asked to remove.
type fakeEvents struct {
	removed []string
	dryRuns int
}

func (f *fakeEvents) RemoveWorkflows(_ context.Context, ids map[string]bool, _ []events.Span, dryRun bool) (events.StoreSize, error) {
	if dryRun {
		f.dryRuns++
		return events.StoreSize{Messages: uint64(len(ids))}, nil
	}
	for id := range ids {
		f.removed = append(f.removed, id)
	}
	slices.Sort(f.removed)
	return events.StoreSize{Messages: uint64(len(ids))}, nil
}

// finish marks a workflow ended with st, as the planner records it.
func finish(t *testing.T, h *harness, id string, st dag.WorkflowState) {
	t.Helper()
	rec, rev, err := h.workflows.Get(context.Background(), id)
	must(t, err)
	rec.Status = st
	_, err = h.workflows.Put(context.Background(), id, rec, rev)
	must(t, err)
	h.e.cache = nil
}

// Pruning never changes what a submission skips as already done: every
// case of TestAlreadyDoneFromThePastRuns, its past runs finished and
// pruned with --keep 0 (all the rule allows), skips the same.
func TestPruneKeepsWhatSkipNeeds(t *testing.T) {
	t.Parallel()
	ok, failed := dag.NodeSucceeded, dag.NodeFailed
	type past struct {
		yaml string
		did  map[string]dag.NodeState
	}
	cases := map[string][]past{
		"created":                   {{chain, map[string]dag.NodeState{"a/x": ok}}},
		"created, then not reached": {{chain, map[string]dag.NodeState{"a/x": ok}}, {chain, nil}, {chain, nil}},
		"created, then failed":      {{chain, map[string]dag.NodeState{"a/x": ok, "b/y": ok}}, {chain, map[string]dag.NodeState{"a/x": failed}}},
		"failed, then created":      {{chain, map[string]dag.NodeState{"a/x": failed}}, {chain, map[string]dag.NodeState{"a/x": ok}}, {chain, map[string]dag.NodeState{"b/y": ok}}},
		"created, then deleted":     {{chain, map[string]dag.NodeState{"a/x": ok}}, {chainDelete, map[string]dag.NodeState{"a/x": ok}}},
		"created on this host, then on another": {{chainOnH2, map[string]dag.NodeState{"a/x": failed}}, {chain, map[string]dag.NodeState{"a/x": ok}},
			{chainOnH2, map[string]dag.NodeState{"a/x": ok}}, {chainOnH2, map[string]dag.NodeState{"a/x": ok}}},
		"many runs of every node": {{chain, map[string]dag.NodeState{"a/x": ok, "b/y": ok}}, {chain, map[string]dag.NodeState{"a/x": ok, "b/y": ok}},
			{chain, map[string]dag.NodeState{"a/x": ok, "b/y": ok}}, {chain, map[string]dag.NodeState{"a/x": ok, "b/y": failed}}},
	}
	for name, runs := range cases {
		for _, yaml := range []string{chain, chainOnH2} {
			t.Run(fmt.Sprintf("%s/%s", name, yaml[strings.Index(yaml, "server: h")+8:][:2]), func(t *testing.T) {
				t.Parallel()
				skips := map[bool]string{}
				for _, prune := range []bool{false, true} {
					h := newHarness(t)
					var ids []string
					for _, r := range runs {
						ids = append(ids, ran(t, h, r.yaml, r.did, nil))
					}
					for _, id := range ids {
						finish(t, h, id, dag.WorkflowSucceeded)
					}
					if prune {
						h.e.Events = &fakeEvents{}
						reply, err := h.e.Prune(context.Background(), PruneRule{Keep: 0, HasKeep: true})
						must(t, err)
						if len(reply.Pruned)+len(reply.Kept) != len(ids) {
							t.Fatalf("pruned %d and kept %d of %d runs", len(reply.Pruned), len(reply.Kept), len(ids))
						}
						// the executors remove the pruned runs' node records
						for _, p := range reply.Pruned {
							_, _ = h.nodes.Remove(context.Background(), p.WorkflowID+".>")
						}
					}
					h.stored()
					must(t, h.submit(yaml))
					skips[prune] = strings.Join(h.stored(), "; ")
				}
				if skips[false] != skips[true] {
					t.Errorf("after the prune:\n  %s\nwithout:\n  %s", skips[true], skips[false])
				}
			})
		}
	}
}

// A prune removes the chosen workflows' records, listings and snapshots
// and announces each; the executors' node records are theirs to remove.
// A running workflow is not touched, nor is the latest finished run.
func TestPruneRemovesTheChosenRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t)
	ev := &fakeEvents{}
	h.e.Events = ev
	all := map[string]dag.NodeState{"a/x": dag.NodeSucceeded, "b/y": dag.NodeSucceeded}
	var ids []string
	for range 4 {
		ids = append(ids, ran(t, h, chain, all, nil))
	}
	for _, id := range ids[:3] {
		finish(t, h, id, dag.WorkflowSucceeded)
	}
	running := ids[3]
	h.stored()

	dry, err := h.e.Prune(ctx, PruneRule{Keep: 0, HasKeep: true, DryRun: true})
	must(t, err)
	if len(dry.Pruned) != 2 || len(dry.Kept) != 1 || dry.Kept[0].WorkflowID != ids[2] || dry.Unfinished != 1 {
		t.Fatalf("dry run: %+v", dry)
	}
	if dry.Removed[events.BucketRuns].Messages != 2 || dry.Removed[events.BucketWorkflows].Messages != 4 || dry.Removed[events.BucketNodes].Messages != 4 {
		t.Errorf("dry run counts %+v", dry.Removed)
	}
	if got := h.stored(); len(got) != 0 || len(ev.removed) != 0 {
		t.Fatalf("a dry run published %v and removed events of %v", got, ev.removed)
	}
	if keys, _ := h.workflows.Keys(ctx, ""); len(keys) != 8 {
		t.Fatalf("a dry run removed records: %v", keys)
	}

	reply, err := h.e.Prune(ctx, PruneRule{Keep: 0, HasKeep: true, Reason: "test"})
	must(t, err)
	if len(reply.Pruned) != 2 || reply.Pruned[0].WorkflowID != ids[0] || reply.Pruned[1].WorkflowID != ids[1] || len(reply.Errors) > 0 {
		t.Fatalf("pruned %+v", reply)
	}
	if !slices.Equal(ev.removed, []string{ids[0], ids[1]}) {
		t.Errorf("events removed of %v", ev.removed)
	}
	var announced []string
	for _, e := range h.out.Stored() {
		if p, ok := e.Payload.(*events.WorkflowPruned); ok {
			announced = append(announced, p.WorkflowID)
			if e.Subject != events.WorkflowLifecycle(p.WorkflowID) || p.FinalStatus != dag.WorkflowSucceeded || p.Reason != "test" {
				t.Errorf("pruned event %+v on %s", p, e.Subject)
			}
			if err := p.Validate(); err != nil {
				t.Error(err)
			}
		}
	}
	if !slices.Equal(announced, []string{ids[0], ids[1]}) {
		t.Errorf("announced %v", announced)
	}
	for _, id := range ids[:2] {
		if _, _, err := h.workflows.Get(ctx, id); !errors.Is(err, events.ErrNoRecord) {
			t.Errorf("workflow record %s: %v", id, err)
		}
		if _, _, err := h.runs.Get(ctx, id); !errors.Is(err, events.ErrNoRecord) {
			t.Errorf("run snapshot %s: %v", id, err)
		}
		if _, _, err := h.workflows.Get(ctx, historyKey("chain", id)); !errors.Is(err, events.ErrNoRecord) {
			t.Errorf("listing of %s: %v", id, err)
		}
	}
	for _, id := range ids[2:] {
		if _, _, err := h.workflows.Get(ctx, id); err != nil {
			t.Errorf("kept workflow %s: %v", id, err)
		}
		if _, _, err := h.runs.Get(ctx, id); err != nil {
			t.Errorf("kept run %s: %v", id, err)
		}
	}
	// The running workflow goes on: its events are still stepped.
	if st := h.status(); st != dag.WorkflowRunning {
		t.Fatalf("running workflow is %s", st)
	}
	// Pruning again finds nothing more to do.
	again, err := h.e.Prune(ctx, PruneRule{Keep: 0, HasKeep: true})
	must(t, err)
	if len(again.Pruned) != 0 {
		t.Errorf("pruned again: %+v", again.Pruned)
	}
	_ = running
}

// A workflow a prune has chosen takes no control request (a retry would
// make it run while its records go), and a prune that stopped half way is
// finished by the next one, whatever its rule.
func TestPruneHalfWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t)
	h.e.Events = &fakeEvents{}
	id := ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeFailed}, nil)
	newer := ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded}, nil)
	finish(t, h, id, dag.WorkflowFailed)
	finish(t, h, newer, dag.WorkflowSucceeded)
	// The record is claimed, then the prune stops.
	h.runs.Fail = func(op, key string) error {
		if op == "remove" {
			return errors.New("the bucket is away")
		}
		return nil
	}
	reply, err := h.e.Prune(ctx, PruneRule{Keep: 1, HasKeep: true})
	must(t, err)
	if len(reply.Pruned) != 1 || len(reply.Errors) != 1 {
		t.Fatalf("reply %+v", reply)
	}
	if _, err := h.e.Control(ctx, id, events.VerbRetry, operator); !errors.Is(err, ErrNotFound) {
		t.Fatalf("retry of a workflow being pruned: %v", err)
	}
	h.runs.Fail = nil
	// A rule that would not choose it now still finishes it.
	reply, err = h.e.Prune(ctx, PruneRule{OlderThan: 1000 * time.Hour})
	must(t, err)
	if len(reply.Pruned) != 1 || reply.Pruned[0].WorkflowID != id {
		t.Fatalf("second prune %+v", reply)
	}
	if _, _, err := h.workflows.Get(ctx, id); !errors.Is(err, events.ErrNoRecord) {
		t.Errorf("record: %v", err)
	}
}

// A retry that made a chosen workflow run again before the prune claimed
// it wins: the prune leaves it alone.
func TestPruneLosesToARetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t)
	h.e.Events = &fakeEvents{}
	id := ran(t, h, chain, nil, nil)
	finish(t, h, id, dag.WorkflowFailed)
	finished, _, err := h.e.finished(ctx)
	must(t, err)
	must(t, h.control(events.VerbRetry)) // h.id is id
	reply := &events.PruneReply{}
	if got := h.e.claim(ctx, finished, time.Now(), reply); len(got) != 0 || len(reply.Errors) != 1 {
		t.Fatalf("claimed %d, errors %v", len(got), reply.Errors)
	}
	if st := h.status(); st != dag.WorkflowRunning {
		t.Fatalf("retried workflow is %s", st)
	}
}

// blockingEvents is fakeEvents whose removal waits, once armed, until
// released: a prune held between its claim and its announcement.
type blockingEvents struct {
	fakeEvents
	in, release chan struct{}
}

func (b *blockingEvents) RemoveWorkflows(ctx context.Context, ids map[string]bool, spans []events.Span, dryRun bool) (events.StoreSize, error) {
	close(b.in)
	<-b.release
	return b.fakeEvents.RemoveWorkflows(ctx, ids, spans, dryRun)
}

// holdingOut is an Emitter whose first Emit of anything but a pruned
// event, once armed, waits until released: a unit of work in progress,
// its events not yet flushed.
type holdingOut struct {
	Emitter
	armed       bool
	in, release chan struct{}
}

func (o *holdingOut) Emit(ctx context.Context, subject string, pl events.Payload, msgID string) {
	o.Emitter.Emit(ctx, subject, pl, msgID)
	if _, pruned := pl.(*events.WorkflowPruned); o.armed && !pruned {
		o.armed = false
		close(o.in)
		<-o.release
	}
}

// A prune announces what it pruned only between units of work: its flush
// must not store (or fail) the events of a unit in progress, whose own
// flush would then find nothing left to store and record decisions whose
// events were never stored.
func TestPruneAnnouncesBetweenUnits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t)
	old := ran(t, h, chain, nil, nil)
	finish(t, h, old, dag.WorkflowSucceeded)
	ran(t, h, chain, nil, nil) // running: h.ref is its
	ev := &blockingEvents{in: make(chan struct{}), release: make(chan struct{})}
	h.e.Events = ev
	out := &holdingOut{Emitter: h.e.Out, in: make(chan struct{}), release: make(chan struct{})}
	h.e.Out = out

	pruned := make(chan error, 1)
	go func() {
		_, err := h.e.Prune(ctx, PruneRule{Keep: 0, HasKeep: true})
		pruned <- err
	}()
	<-ev.in // claimed, not yet announced
	out.armed = true
	unit := make(chan error, 1)
	go func() {
		unit <- h.e.Handle(ctx, h.event(&events.FormulaEvent{Ref: h.ref("a", 1), Status: dag.FormulaSucceeded}))
	}()
	<-out.in // the unit has emitted, and holds the engine
	close(ev.release)
	select {
	case err := <-pruned:
		t.Fatalf("the prune announced while a unit of work was in progress (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(out.release)
	must(t, <-unit)
	must(t, <-pruned)
}
