package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// chainOnH2 is chain with a on another host.
var chainOnH2 = strings.Replace(strings.Replace(chain, "hosts: {h1: {transport: local}}", "hosts: {h1: {transport: local}, h2: {transport: local}}", 1),
	"  - id: a\n    server: h1", "  - id: a\n    server: h2", 1)

// chainDelete deletes what chain created.
var chainDelete = strings.Replace(chain, "name: chain\n", "name: chain\noperation: delete\n", 1)

// chainRerun is chain with its node a/x named in rerun: run again though
// in place.
var chainRerun = strings.Replace(chain, "name: chain\n", "name: chain\nrerun: [a/x]\n", 1)

// otherChain is chain under another name: the same formula ids and specs.
var otherChain = strings.Replace(chain, "name: chain\n", "name: other\n", 1)

// specs are the spec hashes of chain's nodes, by "formula/node".
func specs(t *testing.T, h *harness, yaml string) map[string]string {
	t.Helper()
	reply, err := h.e.Submit(context.Background(), []byte(yaml), true, operator)
	must(t, err)
	m := map[string]string{}
	for _, f := range reply.Plan.Formulas {
		for _, n := range f.Nodes {
			m[f.ID+"/"+n.Name] = n.SpecHash
		}
	}
	return m
}

// ran submits yaml and records, as the executor does, what each node
// did ("a/x": state, in the workflow's operation), with the spec hash the
// plan gives it unless spec names another.
func ran(t *testing.T, h *harness, yaml string, did map[string]dag.NodeState, spec map[string]string) string {
	t.Helper()
	must(t, h.submit(yaml))
	// The run's nodes start a minute after its acceptance, and the clock
	// stays there: the next run is accepted after they started.
	at := h.e.Now().Add(time.Minute)
	h.e.Now = func() time.Time { return at }
	rec, _, err := h.workflows.Get(context.Background(), h.id)
	must(t, err)
	hashes := specs(t, h, yaml)
	for k, st := range did {
		f, n, _ := strings.Cut(k, "/")
		hash := hashes[k]
		if s, ok := spec[k]; ok {
			hash = s
		}
		h.nodes.Set(events.NodeKey(h.id, rec.Operation, f, n), events.NodeRecord{Status: st, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: hash, StartedAt: &at})
	}
	return h.id
}

// neverStarted marks the records of run id's nodes in did as written by
// attempts that started nothing on the host.
func neverStarted(t *testing.T, h *harness, id string, did map[string]dag.NodeState) {
	t.Helper()
	rec, _, err := h.workflows.Get(context.Background(), id)
	must(t, err)
	for k := range did {
		f, n, _ := strings.Cut(k, "/")
		key := events.NodeKey(id, rec.Operation, f, n)
		nr, _, err := h.nodes.Get(context.Background(), key)
		must(t, err)
		nr.NeverStarted = true
		h.nodes.Set(key, nr)
	}
}

// What a create of chain skips, after the runs before it, by the rule of
// the per-host projection's in_place (drift's ok), decided from the
// executors' records of the composition's own runs.
func TestAlreadyDoneFromThePastRuns(t *testing.T) {
	t.Parallel()
	ok, failed, skipped := dag.NodeSucceeded, dag.NodeFailed, dag.NodeSkipped
	type past struct {
		yaml string
		did  map[string]dag.NodeState
		spec map[string]string
	}
	cases := map[string]struct {
		runs  []past
		never int    // the records of runs[never-1] say no attempt started anything (NeverStarted); 0: none
		yaml  string // submitted last (chain when "")
		skip  string // what its dispatch of a skips
	}{
		"nothing ran": {},
		"created":     {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}}, skip: "x"},
		"skipped as done, or its check passed, is done": {runs: []past{{chain, map[string]dag.NodeState{"a/x": skipped}, nil}}, skip: "x"},
		"failed":                     {runs: []past{{chain, map[string]dag.NodeState{"a/x": failed}, nil}}},
		"running":                    {runs: []past{{chain, map[string]dag.NodeState{"a/x": dag.NodeRunning}, nil}}},
		"cancelled between attempts": {runs: []past{{chain, map[string]dag.NodeState{"a/x": dag.NodeCancelled}, nil}}},
		"created with another spec":  {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, map[string]string{"a/x": "sha256:old"}}}},
		"created, then a run that did not reach it":    {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}, {chain, nil, nil}}, skip: "x"},
		"created, then failed":                         {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}, {chain, map[string]dag.NodeState{"a/x": failed}, nil}}},
		"failed, then created":                         {runs: []past{{chain, map[string]dag.NodeState{"a/x": failed}, nil}, {chain, map[string]dag.NodeState{"a/x": ok}, nil}}, skip: "x"},
		"created, then deleted":                        {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}, {chainDelete, map[string]dag.NodeState{"a/x": ok}, nil}}},
		"created, then a delete of it failed":          {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}, {chainDelete, map[string]dag.NodeState{"a/x": failed}, nil}}},
		"another composition with the same ids":        {runs: []past{{otherChain, map[string]dag.NodeState{"a/x": ok}, nil}}},
		"created on another host":                      {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}}, yaml: chainOnH2},
		"created, then submitted with rerun naming it": {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}}, yaml: chainRerun},
		"created on this host, then on another":        {runs: []past{{chainOnH2, map[string]dag.NodeState{"a/x": failed}, nil}, {chain, map[string]dag.NodeState{"a/x": ok}, nil}, {chainOnH2, map[string]dag.NodeState{"a/x": ok}, nil}}, skip: "x"},
		// A run whose attempt started nothing on the host (cancelled while
		// it waited for a slot, or its host unreachable) did not reach the
		// node: what an earlier create put in place is still there.
		"created, then cancelled before it started":   {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}, {chain, map[string]dag.NodeState{"a/x": dag.NodeCancelled}, nil}}, never: 2, skip: "x"},
		"created, then failed with nothing started":   {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}, {chain, map[string]dag.NodeState{"a/x": failed}, nil}}, never: 2, skip: "x"},
		"created, then cancelled once it started":     {runs: []past{{chain, map[string]dag.NodeState{"a/x": ok}, nil}, {chain, map[string]dag.NodeState{"a/x": dag.NodeCancelled}, nil}}},
		"cancelled before it started, nothing before": {runs: []past{{chain, map[string]dag.NodeState{"a/x": dag.NodeCancelled}, nil}}, never: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			for i, r := range tc.runs {
				id := ran(t, h, r.yaml, r.did, r.spec)
				if tc.never == i+1 {
					neverStarted(t, h, id, r.did)
				}
			}
			h.stored()
			yaml := tc.yaml
			if yaml == "" {
				yaml = chain
			}
			must(t, h.submit(yaml))
			want := "dispatch a create g1"
			if tc.skip != "" {
				want += " skip " + tc.skip
			}
			wantStored(t, h, "workflow accepted", "workflow running", "a ready", want)
		})
	}
}

// A run retried after a newer run of the composition ran is the latest to
// have touched its nodes: its record decides them, not the newer run's.
// Before, runs were read in the order they were accepted, and a node the
// newer run created with another spec was skipped though the retry had
// put the older spec back.
func TestAlreadyDoneReadsARetriedRunAsTheLatest(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	older := ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeFailed}, map[string]string{"a/x": "sha256:old"})
	ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded}, nil)
	// The older run is retried an hour later, and its node succeeds with
	// its own spec.
	rec, _, err := h.workflows.Get(context.Background(), older)
	must(t, err)
	later := h.e.Now().Add(time.Hour)
	h.e.Now = func() time.Time { return later }
	rec.Generation = 2 // retried
	h.e.activated(context.Background(), &rec)
	h.nodes.Set(events.NodeKey(older, dag.OpCreate, "a", "x"), events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 2, Generation: 2, GenAttempts: 1, SpecHash: "sha256:old", StartedAt: &later})
	h.stored()
	must(t, h.submit(chain))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1")
}

// A rollback's delete, recorded in the same workflow, undoes its create.
func TestAlreadyDoneNotWhatARollbackDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := ran(t, h, rollback, map[string]dag.NodeState{"a/x": dag.NodeSucceeded, "a/keep": dag.NodeSucceeded}, nil)
	h.nodes.Set(events.NodeKey(id, dag.OpDelete, "a", "x"), events.NodeRecord{Status: dag.NodeSucceeded, Attempt: 1, Generation: 2, GenAttempts: 1})
	h.stored()
	must(t, h.submit(rollback))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1 skip keep")
}

// A run listed among the composition's but never accepted (its record
// was not written) is no run; a check run is not listed.
func TestAlreadyDoneListsOnlyAcceptedCreatesAndDeletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded}, nil)
	h.workflows.Set(historyKey("chain", "ffffffff-ffff-7fff-bfff-ffffffffffff"), Record{ID: "ffffffff-ffff-7fff-bfff-ffffffffffff", Name: "chain", Operation: dag.OpCreate})
	check := ran(t, h, strings.Replace(chain, "name: chain\n", "name: chain\noperation: check\n", 1), nil, nil)
	if _, _, err := h.workflows.Get(context.Background(), historyKey("chain", check)); err == nil {
		t.Fatal("a check run is listed among the composition's runs")
	}
	h.stored()
	must(t, h.submit(chain))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1 skip x")
	if keys, _ := h.workflows.Keys(context.Background(), historyPrefix("chain")+"*"); len(keys) != 3 {
		t.Fatalf("listed %v, want the two creates and the unaccepted one", keys)
	}
}

// A node record or a run record that does not decode skips nothing, fails
// no submission, and is reported: a warning naming the workflow, host and
// node, and gantry_planner_records_ignored_total. Not parallel: the
// counter is global.
func TestDamagedRecordsAreReportedAndSkipNothing(t *testing.T) {
	count := func(bucket string) float64 { return testutil.ToFloat64(recordsIgnored.WithLabelValues(bucket)) }
	nodesBefore, workflowsBefore := count(events.BucketNodes), count(events.BucketWorkflows)
	h := newHarness(t)
	var logs bytes.Buffer
	h.e.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	first := ran(t, h, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded, "b/y": dag.NodeSucceeded}, nil)
	h.nodes.SetRaw(events.NodeKey(first, dag.OpCreate, "a", "x"), []byte("\x00 not a record"))
	h.stored()
	must(t, h.submit(chain))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1")
	if got := h.e.cache[h.id].rec.AlreadyDone; len(got) != 1 || got[0] != "b/y" {
		t.Fatalf("already done %v, want b/y (its record is fine)", got)
	}
	for _, want := range []string{`"level":"WARN"`, `"workflow_id":"` + first + `"`, `"host":"h1"`, `"formula":"a"`, `"node":"x"`, `"reason":"record does not decode`, `"bucket":"gantry_nodes"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %s in the log:\n%s", want, logs.String())
		}
	}
	if d := count(events.BucketNodes) - nodesBefore; d != 1 {
		t.Errorf("ignored node records +%g, want +1", d)
	}
	// The newest run's own record damaged: what it did is unknown, so
	// nothing older decides what it may have touched.
	h.workflows.SetRaw(h.id, []byte("\x00 not a record"))
	h.stored()
	reply, err := h.e.Submit(context.Background(), []byte(chain), false, operator)
	if err != nil || reply.Status != "accepted" {
		t.Fatalf("submit with a damaged run record: %v %+v", err, reply)
	}
	rec, _, err := h.workflows.Get(context.Background(), reply.WorkflowID)
	must(t, err)
	if len(rec.AlreadyDone) != 0 {
		t.Fatalf("already done %v after a damaged run record, want nothing", rec.AlreadyDone)
	}
	if d := count(events.BucketWorkflows) - workflowsBefore; d != 1 {
		t.Errorf("ignored workflow records +%g, want +1", d)
	}
}

// Runs accepted before the planner listed them by composition are listed
// when a planner starts (Resume reads every workflow anyway), so the
// first submission after an upgrade skips what they did.
func TestResumeListsRunsAcceptedBeforeTheLists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := newHarness(t)
	id := ran(t, old, chain, map[string]dag.NodeState{"a/x": dag.NodeSucceeded}, nil)
	must(t, old.formula("a", 1, dag.FormulaSucceeded))
	// The same stores without the list: as an older planner left them.
	h := newHarness(t)
	rec, _, err := old.workflows.Get(ctx, id)
	must(t, err)
	snap, _, err := old.runs.Get(ctx, id)
	must(t, err)
	h.workflows.Set(id, rec)
	h.runs.Set(id, snap)
	h.nodes = old.nodes
	h.e.Nodes = old.nodes
	h.fresh()
	if failed, err := h.e.Resume(ctx); err != nil || len(failed) != 0 {
		t.Fatalf("resume: %v %v", failed, err)
	}
	if _, _, err := h.workflows.Get(ctx, historyKey("chain", id)); err != nil {
		t.Fatalf("not listed after a start: %v", err)
	}
	h.stored()
	must(t, h.submit(chain))
	wantStored(t, h, "workflow accepted", "workflow running", "a ready", "dispatch a create g1 skip x")
}

// The dispatches of a create say from which revision of the executors'
// node records a success of another workflow is skipped at the node's
// turn: the revision of gantry_nodes read when the workflow was accepted
// (what was recorded by then decided what is already done). It is kept
// with the workflow (a restarted planner sends the same); a create with
// reset: true, a delete, and a rollback's delete carry none.
func TestDispatchSaysFromWhenToSkipAtTheTurn(t *testing.T) {
	t.Parallel()
	after := func(h *harness) []string {
		t.Helper()
		var out []string
		for _, e := range h.out.Stored() {
			if d, ok := e.Payload.(*events.Dispatch); ok {
				s := fmt.Sprintf("%s %s g%d", d.Formula, d.Operation, d.Generation)
				if d.SkipAtTurnAfter != nil {
					s += fmt.Sprintf(" after %d", *d.SkipAtTurnAfter)
				}
				out = append(out, s)
			}
		}
		return out
	}
	h := newHarness(t)
	for i := range 3 { // records of other runs: revisions 1 to 3
		h.nodes.Set(events.NodeKey(fmt.Sprint("past-", i), dag.OpCreate, "a", "x"), events.NodeRecord{Status: dag.NodeFailed})
	}
	must(t, h.submit(chain))
	h.recordNode(dag.OpCreate, "a", "x", dag.NodeSucceeded) // revision 4: after the submission
	h.fresh()                                               // a restarted planner steps it on
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	if got := strings.Join(after(h), ", "); got != "a create g1 after 3, b create g1 after 3" {
		t.Fatalf("dispatches: %s", got)
	}

	for name, yaml := range map[string]string{"reset": strings.Replace(chain, "name: chain\n", "name: chain\nreset: true\n", 1), "delete": chainDelete} {
		h := newHarness(t)
		must(t, h.submit(yaml))
		if got := strings.Join(after(h), ", "); strings.Contains(got, "after") {
			t.Errorf("%s: %s", name, got)
		}
	}

	h = newHarness(t)
	must(t, h.submit(rollback))
	h.recordNode(dag.OpCreate, "a", "x", dag.NodeSucceeded)
	h.recordNode(dag.OpCreate, "a", "keep", dag.NodeSucceeded)
	must(t, h.formula("a", 1, dag.FormulaSucceeded))
	h.recordNode(dag.OpCreate, "b", "y", dag.NodeFailed)
	must(t, h.formula("b", 1, dag.FormulaFailed))
	if got := strings.Join(after(h), ", "); got != "a create g1 after 0, b create g1 after 0, a delete g2" {
		t.Fatalf("rollback: %s", got)
	}
}
