package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A workflow record grows after its acceptance: a rollback adds its
// delete composition, a retry the formulas it runs again and the nodes
// it holds, a write the workflow events it announces. A record that
// cannot be written stops its run where it is (every unit that writes it
// fails), so a composition is accepted only when its record, grown as
// far as its run can grow it, still fits in one message (recordFits).

// unrecordable is the refusal of a composition whose record, grown as far
// as its run can grow it, does not fit in one message; nil when it fits.
func (e *Engine) unrecordable(rec *Record) *events.SubmitReply {
	err := e.recordFits(rec)
	if !errors.Is(err, eventbus.ErrTooLarge) {
		return nil
	}
	c := rec.Composition
	return &events.SubmitReply{Status: "rejected", Errors: []string{"composition " + c.Name + " is too large to record with room for what its run adds (" +
		growth(c) + "): " + err.Error() + "; split it into several compositions (for example one per group or zone)"}}
}

// recordFits says whether rec, grown as far as its run can grow it, fits
// in one message (eventbus.ErrTooLarge if not).
func (e *Engine) recordFits(rec *Record) error {
	_, err := eventbus.EncodeRecord(e.grown(rec))
	return err
}

// grown is rec as large as its run can make it: the rollback of every
// node with a delete (under on_failure: rollback), a retry of every
// formula holding every node, two announced failures of the longest
// reason, a cancel and an expired deadline.
func (e *Engine) grown(rec *Record) *Record {
	g := *rec
	plan := rec.plan()
	if rec.Composition.OnFailure == dag.OnFailureRollback && rec.Operation == dag.OpCreate {
		g.Rollback = rollbackOf(rec.Composition, deletable(rec.Composition))
	}
	ids := make([]string, len(plan.Formulas))
	g.Held = map[string][]string{}
	for i := range plan.Formulas {
		pf := &plan.Formulas[i]
		ids[i] = pf.ID
		for j := range pf.Nodes {
			g.Held[pf.ID] = append(g.Held[pf.ID], pf.Nodes[j].Name)
		}
	}
	g.Began = &Began{Generation: 2, Rerun: ids}
	g.Carried = ids
	reason := longestReason()
	g.FailReason, g.Expired = reason, reason
	now := e.now()
	by := &events.Principal{Name: reason[:64], Attested: true}
	g.CancelledBy, g.CancelledAt, g.Deadline = by, &now, &now
	g.GenerationStarts = []time.Time{now, now}
	r := &run{rec: &g, plan: plan, state: plan.NewRunState()}
	for range 2 {
		ev := e.workflowEvent(r, dag.WorkflowFailed, reason, by)
		ev.Cancelling, ev.Stopping = true, ids[:min(len(ids), 1)]
		g.Announce = append(g.Announce, Announcement{Subject: events.WorkflowLifecycle(rec.ID), MsgID: reason[:96], Event: ev})
	}
	return &g
}

// deletable is, per formula of c, its nodes with a delete command.
func deletable(c *dag.Composition) map[string]map[string]bool {
	keep := map[string]map[string]bool{}
	for _, f := range c.Formulas {
		for _, n := range f.Nodes {
			if n.Delete == "" {
				continue
			}
			if keep[f.ID] == nil {
				keep[f.ID] = map[string]bool{}
			}
			keep[f.ID][n.Name] = true
		}
	}
	return keep
}

// longestReason is a reason as long as a workflow's can be (every named
// failure at its longest), of text that does not compress.
func longestReason() string {
	n := (maxNamedFailures+1)*(events.MaxFailureReasonBytes+64) + 128
	b := make([]byte, 0, n+64)
	sum := sha256.Sum256([]byte("reason"))
	for len(b) < n {
		b = hex.AppendEncode(b, sum[:])
		sum = sha256.Sum256(sum[:])
	}
	return string(b[:n])
}

// growth says what a run of c adds to its record, for a refusal.
func growth(c *dag.Composition) string {
	if c.OnFailure == dag.OnFailureRollback && c.Operation == dag.OpCreate {
		return "its rollback's delete plan, retries, reasons"
	}
	return "retries, reasons"
}
