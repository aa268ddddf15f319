package prune

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

type fakeLogs struct{ ids []string }

func (f *fakeLogs) RemoveWorkflows(_ context.Context, ids map[string]bool, _ []events.Span) (events.StoreSize, error) {
	for id := range ids {
		f.ids = append(f.ids, id)
	}
	slices.Sort(f.ids)
	return events.StoreSize{Messages: uint64(len(ids))}, nil
}

func setup(runs ...string) (*Remover, *eventbustest.MemoryBucket[events.NodeRecord], *fakeLogs) {
	nodes := &eventbustest.MemoryBucket[events.NodeRecord]{}
	rs := &eventbustest.MemoryBucket[events.RunSnapshot]{}
	for _, id := range []string{"w1", "w2", "w3"} {
		for _, n := range []string{"x", "y"} {
			nodes.Set(events.NodeKey(id, dag.OpCreate, "a", n), events.NodeRecord{Status: dag.NodeSucceeded})
		}
	}
	for _, id := range runs {
		rs.Set(id, events.RunSnapshot{Generation: 1, Status: dag.WorkflowSucceeded})
	}
	logs := &fakeLogs{}
	return &Remover{Nodes: nodes, Runs: rs, Logs: logs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, nodes, logs
}

func workflows(t *testing.T, nodes *eventbustest.MemoryBucket[events.NodeRecord]) string {
	t.Helper()
	keys, err := nodes.Keys(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range keys {
		id, _, _ := strings.Cut(k, ".")
		ids = append(ids, id)
	}
	return strings.Join(slices.Compact(ids), " ")
}

// A pruned event removes that workflow's node records and output lines,
// nothing of another's; again, it does nothing more.
func TestPrunedRemovesOnlyItsWorkflow(t *testing.T) {
	rm, nodes, logs := setup("w2", "w3")
	ev := &events.WorkflowPruned{Ref: events.Ref{WorkflowID: "w1", Workflow: "c", Operation: dag.OpCreate}, FinalStatus: dag.WorkflowSucceeded,
		CreatedAt: time.Now().Add(-time.Hour), EndedAt: time.Now()}
	for range 2 {
		if err := rm.Pruned(context.Background(), []*events.WorkflowPruned{ev}); err != nil {
			t.Fatal(err)
		}
	}
	if got := workflows(t, nodes); got != "w2 w3" {
		t.Errorf("node records left of %q", got)
	}
	if !slices.Equal(logs.ids, []string{"w1", "w1"}) {
		t.Errorf("lines removed of %v", logs.ids)
	}
}

// Reconcile removes the node records of the workflows whose run snapshot
// is gone (pruned while the executor was away), and keeps the others'.
func TestReconcile(t *testing.T) {
	cases := map[string]struct {
		runs []string
		gone string
		left string
	}{
		"every run there":             {runs: []string{"w1", "w2", "w3"}, left: "w1 w2 w3"},
		"one pruned":                  {runs: []string{"w1", "w3"}, gone: "w2", left: "w1 w3"},
		"two pruned":                  {runs: []string{"w3"}, gone: "w1 w2", left: "w3"},
		"no snapshot at all: nothing": {left: "w1 w2 w3"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rm, nodes, _ := setup(tc.runs...)
			gone, err := rm.Reconcile(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(gone, " ") != tc.gone || workflows(t, nodes) != tc.left {
				t.Errorf("removed %v, left %q; want %q and %q", gone, workflows(t, nodes), tc.gone, tc.left)
			}
		})
	}
}

// laggingRuns is a replica behind the others: it holds none of the run
// snapshots the leader (the memory bucket under it) holds.
type laggingRuns struct {
	*eventbustest.MemoryBucket[events.RunSnapshot]
}

func (laggingRuns) Get(context.Context, string) (events.RunSnapshot, uint64, error) {
	return events.RunSnapshot{}, 0, events.ErrNoRecord
}

// A run snapshot a replica behind does not hold is not gone: only the
// leader's answer removes node records (removing a live run's would let
// its nodes run again).
func TestReconcileTrustsOnlyTheLeader(t *testing.T) {
	rm, nodes, _ := setup("w1", "w3")
	rm.Runs = laggingRuns{rm.Runs.(*eventbustest.MemoryBucket[events.RunSnapshot])}
	gone, err := rm.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(gone, " ") != "w2" || workflows(t, nodes) != "w1 w3" {
		t.Errorf("removed %v, left %q; want only w2 removed", gone, workflows(t, nodes))
	}
}
