// Package prune removes what the executor wrote of a pruned workflow: its
// node records (gantry_nodes) and its output lines (GANTRY_LOGS). The
// planner announces each workflow it prunes (gantry.workflow.pruned on
// workflow.<id>.lifecycle); an executor that was down, or disconnected,
// when the announcement went by finds the workflows it missed by
// reconciling: node records of a workflow whose run snapshot the planner
// has removed belong to a pruned workflow (a snapshot is written before
// anything of its workflow is dispatched, and removed only by a prune).
package prune

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/gantry-dev/gantry/pkg/events"
)

// Nodes are the executor's node records (gantry_nodes).
type Nodes interface {
	Keys(ctx context.Context, filter string) ([]string, error)
	Remove(ctx context.Context, filter string) (uint64, error)
}

// Runs are the planner's run snapshots (gantry_runs), read only.
type Runs interface {
	Get(ctx context.Context, key string) (events.RunSnapshot, uint64, error)
	// Absent asks the authoritative copy whether key holds no snapshot:
	// Get may read a replica that is behind.
	Absent(ctx context.Context, key string) (bool, error)
	Keys(ctx context.Context, filter string) ([]string, error)
}

// Logs is the output line stream (GANTRY_LOGS).
type Logs interface {
	RemoveWorkflows(ctx context.Context, ids map[string]bool, spans []events.Span) (events.StoreSize, error)
}

// Remover removes pruned workflows' node records and output lines.
type Remover struct {
	Nodes Nodes
	Runs  Runs
	Logs  Logs // nil: lines stay until the stream's limits drop them
	Log   *slog.Logger

	mu sync.Mutex // one removal at a time
}

// Pruned removes what the executor wrote of the workflows in evs, as
// announced. It is idempotent: removing what is gone does nothing.
func (r *Remover) Pruned(ctx context.Context, evs []*events.WorkflowPruned) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := map[string]bool{}
	var spans []events.Span
	var errs []error
	var records uint64
	for _, ev := range evs {
		ids[ev.WorkflowID] = true
		spans = append(spans, events.WorkflowSpan(ev.CreatedAt, ev.EndedAt))
		n, err := r.Nodes.Remove(ctx, ev.WorkflowID+".>")
		if err != nil {
			errs = append(errs, fmt.Errorf("node records of %s: %w", ev.WorkflowID, err))
		}
		records += n
	}
	var lines events.StoreSize
	if r.Logs != nil {
		var err error
		if lines, err = r.Logs.RemoveWorkflows(ctx, ids, spans); err != nil {
			errs = append(errs, fmt.Errorf("output lines: %w", err))
		}
	}
	r.Log.Info("pruned workflows removed", "workflows", len(ids), "node_records", records, "output_lines", lines.Messages)
	return errors.Join(errs...)
}

// Reconcile removes the node records of every workflow whose run snapshot
// is gone: pruned while this executor did not hear of it. It returns the
// workflows whose records it removed. When gantry_runs holds no snapshot
// at all while node records exist, it removes nothing and says so: the
// bucket was more likely emptied by hand (or re-created) than every run
// pruned, and the node records are what a submission skips by.
func (r *Remover) Reconcile(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys, err := r.Nodes.Keys(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list node records: %w", err)
	}
	var ids []string
	for _, k := range keys {
		id, _, _ := strings.Cut(k, ".")
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	runs, err := r.Runs.Keys(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list run snapshots: %w", err)
	}
	if len(runs) == 0 {
		r.Log.Warn("gantry_runs has no run snapshot while node records exist: not removing any (was it emptied?)", "workflows", len(ids))
		return nil, nil
	}
	var gone []string
	for _, id := range ids {
		held, err := r.held(ctx, id)
		if err != nil {
			return gone, err
		}
		if held {
			continue
		}
		if _, err := r.Nodes.Remove(ctx, id+".>"); err != nil {
			return gone, fmt.Errorf("remove the node records of %s: %w", id, err)
		}
		gone = append(gone, id)
	}
	if len(gone) > 0 {
		r.Log.Info("removed the node records of workflows pruned while this executor did not hear of it", "workflows", len(gone))
	}
	return gone, nil
}

// held says whether the run snapshot of workflow id is still there. A
// replica behind the others answers "no record" for a run started since
// it fell behind: only the authoritative copy's answer removes anything.
func (r *Remover) held(ctx context.Context, id string) (bool, error) {
	_, _, err := r.Runs.Get(ctx, id)
	switch {
	case err == nil || errors.Is(err, events.ErrBadRecord):
		return true, nil
	case !errors.Is(err, events.ErrNoRecord):
		return false, fmt.Errorf("read the run snapshot of %s: %w", id, err)
	}
	absent, err := r.Runs.Absent(ctx, id)
	if err != nil {
		return false, fmt.Errorf("confirm the run snapshot of %s is gone: %w", id, err)
	}
	return !absent, nil
}
