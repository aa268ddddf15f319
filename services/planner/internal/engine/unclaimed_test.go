package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// zonesOf is what the dispatch consumers say, by zone; a zone not listed
// has no consumer (no executor of it ever started).
type zonesOf map[string]events.Takers

func (z zonesOf) Takers(_ context.Context, zone string) (events.Takers, error) {
	t, ok := z[zone]
	t.Zone, t.Exists = zone, ok
	return t, nil
}

// nowhere: a's host is in a zone no executor serves; b's host has no zone.
const nowhere = `
name: nw
hosts:
  far: {transport: local, labels: {zone: nowhere}}
  h1: {transport: local}
formulas:
  - {id: a, server: far, nodes: [{name: x, run: "true"}]}
  - {id: b, server: h1, nodes: [{name: y, run: "sleep 60"}]}
`

// A dispatch that no executor takes within UnclaimedAfter is reported
// once, naming its zone, as its formula ready again with the reason as
// its error (what gantry status shows); one an executor takes is not.
// A cancel then ends the untaken formula at once (the planner knows no
// executor holds it) while the taken one is waited for as before.
func TestUnclaimedDispatch(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "same planner", true: "planner restarted"}[restart], func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			c := &clock{t0}
			zones := zonesOf{"": {Pulling: 1}} // an executor for hosts without a zone, asking for work
			h.e.Now, h.e.Zones, h.e.UnclaimedAfter = c.Now, zones, 2*time.Second
			h.errors = true
			must(t, h.submit(nowhere))
			h.want("start", "workflow accepted", "workflow running", "a ready", "dispatch a create g1", "b ready", "dispatch b create g1")
			start := t0
			if restart {
				c.now = t0.Add(time.Second)
				h.restartAt(c, 0, zones)
				h.e.UnclaimedAfter = 2 * time.Second
				start = c.now // a restarted planner counts from its start
			}
			c.now = start.Add(2*time.Second - time.Millisecond)
			h.e.CheckUnclaimed(context.Background())
			h.want("before the time")
			c.now = start.Add(2 * time.Second)
			h.e.CheckUnclaimed(context.Background())
			h.want("after it", "a ready: no executor serves zone nowhere (start one with --labels zone=nowhere) (its dispatch is unclaimed after 2s)")
			c.now = start.Add(10 * time.Second)
			h.e.CheckUnclaimed(context.Background())
			h.want("once")
			must(t, h.control(events.VerbCancel))
			h.want("cancel",
				"a/x cancelled: not started: no executor took its work (no executor serves zone nowhere (start one with --labels zone=nowhere))",
				"a cancelled: no executor serves zone nowhere (start one with --labels zone=nowhere)",
				"workflow running: cancelling by request: stopping 1 running formula(s)")
			must(t, h.formula("b", 1, dag.FormulaCancelled))
			h.want("b's outcome", "workflow cancelled: cancelled by request")
			if h.status() != dag.WorkflowCancelled || h.snapshot() != "cc" {
				t.Fatalf("status %s, formulas %q", h.status(), h.snapshot())
			}
		})
	}
}

// With only untaken work dispatched, a cancel ends the workflow in the
// request itself.
func TestCancelOfUntakenWorkEndsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.e.Zones = zonesOf{"nowhere": {}} // its executors came and went: nobody asks for work
	h.errors = true
	must(t, h.submit(`
name: nw
hosts: {far: {transport: local, labels: {zone: nowhere}}}
formulas: [{id: a, server: far, nodes: [{name: x, run: "true"}]}]
`))
	h.stored()
	must(t, h.control(events.VerbCancel))
	h.want("cancel",
		"a/x cancelled: not started: no executor took its work (no executor of zone nowhere is running: none asks for work)",
		"a cancelled: no executor of zone nowhere is running: none asks for work",
		"workflow cancelled: cancelled by request")
	if h.status() != dag.WorkflowCancelled {
		t.Fatalf("status %s", h.status())
	}
}

// Executors of a zone that are all busy, with work queued behind them,
// are named as such; a zone whose executor holds the work (nothing
// queued) is not reported, and its formula is waited for on cancel.
func TestBusyZone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := &clock{t0}
	zones := zonesOf{"nowhere": {InHand: 64, Queued: 3}, "": {InHand: 1}}
	h.e.Now, h.e.Zones, h.e.UnclaimedAfter = c.Now, zones, time.Second
	h.errors = true
	must(t, h.submit(nowhere))
	h.stored()
	c.now = t0.Add(time.Second)
	h.e.CheckUnclaimed(context.Background())
	h.want("busy", "a ready: the executors of zone nowhere are busy: they hold 64 dispatch(es), 3 more are queued (its dispatch is unclaimed after 1s)")
	must(t, h.control(events.VerbCancel))
	h.want("cancel", "workflow running: cancelling by request: stopping 2 running formula(s)")
}

// A formula past its timeout that no executor has taken fails at once,
// its nodes cancelled, and on_failure applies.
func TestDeadlineOfUntakenFormula(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := &clock{t0}
	h.e.Now, h.e.Zones = c.Now, zonesOf{"": {Pulling: 1}}
	h.errors = true
	must(t, h.submit(`
name: nw
hosts:
  far: {transport: local, labels: {zone: nowhere}}
  h1: {transport: local}
formulas:
  - {id: a, server: far, timeout: 3s, nodes: [{name: x, run: "true"}]}
  - {id: b, server: h1, depends_on: [a], nodes: [{name: y, run: "true"}]}
`))
	h.stored()
	c.now = t0.Add(3 * time.Second)
	h.e.ExpireDeadlines(context.Background())
	h.want("a's deadline",
		"a/x cancelled: not started: its formula's timeout passed before any executor took its work",
		"a failed: deadline: formula a's timeout of 3s passed before any executor took its work (no executor serves zone nowhere (start one with --labels zone=nowhere))",
		"b/y blocked", "b blocked (a)", "workflow failed: formula a failed: deadline: its timeout of 3s passed")
}
