// Package drift compares what a composition wants (the nodes and spec
// hashes of its plan, rendered by the requester) with what the per-host
// projection records.
package drift

import (
	"sort"

	"github.com/gantry-dev/gantry/pkg/events"
)

// Compare reports every node the query wants as ok (a create of the
// composition put it in place: events.HostNode.InPlace), changed (in
// place with another spec hash) or missing, and every node the
// composition put in place on one of the plan's hosts but no longer has
// as orphaned. recorded holds the per-host projection of those hosts;
// other compositions' records in it are not this one's, and are left out. An item's HaveSpec, HaveStatus and
// WorkflowID are of the create that put the node in place; for a missing
// node, its last transition's status and workflow. The result is sorted
// by host, formula, node.
func Compare(q *events.DriftQuery, recorded []events.HostNode) events.DriftReport {
	rep := events.DriftReport{Workflow: q.Workflow, Counts: map[string]int{events.DriftOK: 0, events.DriftMissing: 0, events.DriftChanged: 0, events.DriftOrphaned: 0}}
	type key struct{ host, formula, node string }
	var own []events.HostNode
	for _, hn := range recorded {
		if hn.Workflow == q.Workflow {
			own = append(own, hn)
		}
	}
	have := make(map[key]events.HostNode, len(own))
	for _, hn := range own {
		have[key{hn.Host, hn.Formula, hn.Node}] = hn
	}
	wanted := map[key]bool{}
	hosts := map[string]bool{}
	for _, w := range q.Nodes {
		k := key{w.Host, w.Formula, w.Node}
		if wanted[k] {
			continue // asked twice: reported once
		}
		wanted[k], hosts[w.Host] = true, true
		it := events.DriftItem{Host: w.Host, Formula: w.Formula, Node: w.Node, WantSpec: w.Spec}
		hn, ok := have[k]
		switch {
		case !ok:
			it.Drift = events.DriftMissing
		case hn.InPlace == nil:
			it.Drift, it.HaveStatus, it.WorkflowID = events.DriftMissing, string(hn.Status), hn.WorkflowID
		default:
			it.Drift, it.HaveSpec, it.HaveStatus, it.WorkflowID = events.DriftOK, hn.InPlace.SpecHash, string(hn.InPlace.Status), hn.InPlace.WorkflowID
			if hn.InPlace.SpecHash != w.Spec {
				it.Drift = events.DriftChanged
			}
		}
		rep.Items = append(rep.Items, it)
	}
	for _, hn := range own {
		k := key{hn.Host, hn.Formula, hn.Node}
		if !hosts[hn.Host] || wanted[k] || hn.InPlace == nil {
			continue
		}
		rep.Items = append(rep.Items, events.DriftItem{Host: hn.Host, Formula: hn.Formula, Node: hn.Node, Drift: events.DriftOrphaned,
			HaveSpec: hn.InPlace.SpecHash, HaveStatus: string(hn.InPlace.Status), WorkflowID: hn.InPlace.WorkflowID})
	}
	for _, it := range rep.Items {
		rep.Counts[it.Drift]++
	}
	sort.Slice(rep.Items, func(i, j int) bool {
		a, b := rep.Items[i], rep.Items[j]
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		if a.Formula != b.Formula {
			return a.Formula < b.Formula
		}
		return a.Node < b.Node
	})
	return rep
}
