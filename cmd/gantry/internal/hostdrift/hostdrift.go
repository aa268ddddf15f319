// Package hostdrift says, per node of a composition, what its host
// reports: gantry drift's default, which asks the hosts rather than the
// records. The hosts are asked by a workflow of the composition's own
// checks (operation check, see CheckRun); each node's outcome in it is
// mapped to a drift state here (Classify), beside what the per-host
// records say (Merge), and reconcile decides from both (Item.Reconcile).
package hostdrift

import (
	"fmt"
	"sort"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Drift states of a node as its host reports it.
const (
	OK          = "ok"          // its check passed (exit 0) and every file of it is as the composition wants
	Changed     = "changed"     // its check failed (exit not 0), or a file of it differs
	Missing     = "missing"     // a file of it is not on the host
	Unreachable = "unreachable" // its host could not be reached or trusted, or gave no answer within the timeout
	Unknown     = "unknown"     // nothing can tell: no check and no files, or the check could not run
	Orphaned    = "orphaned"    // in place by the records, but no longer in the composition (no host is asked)
)

// States lists the states in the order counts are printed.
var States = []string{OK, Changed, Missing, Unreachable, Unknown, Orphaned}

// File is what the host says of one file a node manages.
type File struct {
	Path  string `json:"path"`
	State string `json:"state"`          // ok, changed or missing
	Diff  string `json:"diff,omitempty"` // unified diff, when the check run gives one
}

// Item is one node of a host drift report.
type Item struct {
	Host    string `json:"host"`
	Formula string `json:"formula"`
	Node    string `json:"node"`
	Drift   string `json:"drift"`            // the host's state (States)
	Reason  string `json:"reason,omitempty"` // why: the check's exit status, the error, what cannot tell
	// Records is what the per-host records say (gantry drift --records:
	// ok, changed, missing, orphaned); RecordedStatus and WorkflowID are
	// of the record.
	Records        string `json:"records"`
	RecordedStatus string `json:"recorded_status,omitempty"`
	WorkflowID     string `json:"workflow_id,omitempty"`
	Files          []File `json:"files,omitempty"`
}

// Report is gantry drift's document.
type Report struct {
	Workflow string `json:"workflow"`
	// CheckWorkflowID is the operation check run that asked the hosts.
	CheckWorkflowID string         `json:"check_workflow_id"`
	Counts          map[string]int `json:"counts"`
	Items           []Item         `json:"items"`
}

// Node is what the composition gives to tell a node's state on its host.
type Node struct {
	HasCheck bool // a check command
	HasFiles bool // managed files
}

// Outcome is how a node ended in the check run.
type Outcome struct {
	Status      dag.NodeState
	Check       events.CheckResult
	Unreachable bool
	ExitCode    *int
	Error       string
	Reason      string
	Blocker     string // the node (in its formula) whose failure blocked it
	Files       []File // per-file results of the check, when it manages files
}

// Classify maps a node's outcome in the check run to its state on the
// host, and says why. o is nil when the node had not ended when gantry
// stopped waiting (timeout). A node with neither a check nor files is
// unknown, whatever happened: nothing can tell. blocker is the outcome of
// the node that blocked it, when it was blocked (nil otherwise).
func Classify(n Node, o, blocker *Outcome, timeout time.Duration) (state, reason string) {
	switch {
	case !n.HasCheck && !n.HasFiles:
		return Unknown, "no check and no files: nothing can tell"
	case o == nil:
		return Unreachable, fmt.Sprintf("no answer within %s (--timeout)", timeout)
	case o.Status == dag.NodeFailed && o.Unreachable:
		return Unreachable, o.Error
	case o.Status == dag.NodeBlocked && blocker != nil && blocker.Unreachable:
		return Unreachable, blocker.Error
	case o.Status == dag.NodeBlocked:
		return Unknown, "not checked: " + o.Blocker + " could not be checked"
	case o.Status != dag.NodeSucceeded:
		return Unknown, "the check did not complete (" + string(o.Status) + "): " + firstOf(o.Error, o.Reason, "no reason given")
	}
	return verdict(n, o)
}

// verdict is the state of a node whose check run completed: its files
// first (missing, then changed), then its check command.
func verdict(n Node, o *Outcome) (string, string) {
	for _, want := range []string{Missing, Changed} {
		for _, f := range o.Files {
			if f.State == want {
				return want, "file " + f.Path + " " + want
			}
		}
	}
	if n.HasCheck && o.Check != events.CheckOK {
		why := "its check failed"
		if o.ExitCode != nil {
			why = fmt.Sprintf("its check exited %d", *o.ExitCode)
		}
		return Changed, why
	}
	return OK, ""
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Key names a node on its host.
type Key struct{ Host, Formula, Node string }

// Merge puts the records' drift beside the hosts' states: items are the
// plan's nodes with their host state (Drift, Reason, Files), rec the
// state-store's drift of the same composition. Nodes the records have
// and the composition no longer has are orphaned. The result is sorted by
// host, formula, node, with its counts.
func Merge(workflow, checkID string, items []Item, rec *events.DriftReport) Report {
	recorded := make(map[Key]events.DriftItem, len(rec.Items))
	for _, it := range rec.Items {
		recorded[Key{it.Host, it.Formula, it.Node}] = it
	}
	out := Report{Workflow: workflow, CheckWorkflowID: checkID, Counts: map[string]int{}, Items: make([]Item, 0, len(items))}
	for _, it := range items {
		r, ok := recorded[Key{it.Host, it.Formula, it.Node}]
		it.Records = events.DriftMissing
		if ok {
			it.Records, it.RecordedStatus, it.WorkflowID = r.Drift, r.HaveStatus, r.WorkflowID
		}
		out.Items = append(out.Items, it)
	}
	for _, r := range rec.Items {
		if r.Drift == events.DriftOrphaned {
			out.Items = append(out.Items, Item{Host: r.Host, Formula: r.Formula, Node: r.Node, Drift: Orphaned,
				Reason: "not in the composition any more", Records: r.Drift, RecordedStatus: r.HaveStatus, WorkflowID: r.WorkflowID})
		}
	}
	for _, s := range States {
		out.Counts[s] = 0
	}
	for _, it := range out.Items {
		out.Counts[it.Drift]++
	}
	sort.SliceStable(out.Items, func(i, j int) bool {
		a, b := out.Items[i], out.Items[j]
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		if a.Formula != b.Formula {
			return a.Formula < b.Formula
		}
		return a.Node < b.Node
	})
	return out
}

// Reconcile says what gantry reconcile does with a node: run it (a create
// of its formula), and whether it must be named in rerun because the
// records have it in place with the same spec (the planner would skip it
// as already done). Changed and missing nodes run; an unknown node runs
// when the records do not have it in place with the same spec (missing or
// changed there); ok, unreachable and orphaned nodes do not.
func (it Item) Reconcile() (run, rerun bool) {
	switch it.Drift {
	case Changed, Missing:
		return true, it.Records == events.DriftOK
	case Unknown:
		return it.Records == events.DriftMissing || it.Records == events.DriftChanged, false
	}
	return false, false
}

// Found says what a report found: changes (changed, missing or orphaned
// nodes) and hosts that could not be asked (unreachable nodes).
func (r *Report) Found() (changes, unreachable bool) {
	return r.Counts[Changed]+r.Counts[Missing]+r.Counts[Orphaned] > 0, r.Counts[Unreachable] > 0
}
