package engine

import (
	"context"
	"fmt"
	"strconv"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// The events and work the planner emits. None waits: the unit of work
// flushes them before it records what they announce.

func (e *Engine) ref(r *run, i int) events.Ref {
	pf := &r.plan.Formulas[i]
	return events.Ref{WorkflowID: r.rec.ID, Workflow: r.rec.Name, Formula: pf.ID, Host: pf.Server, Operation: r.plan.Operation, Generation: r.rec.Generation}
}

func (e *Engine) msgID(r *run, parts ...string) string {
	return events.MsgID(append([]string{r.rec.ID, strconv.Itoa(r.rec.Generation)}, parts...)...)
}

func hostSpec(c *dag.Composition, server string) events.HostSpec {
	h := c.Hosts[server]
	return events.HostSpec{Transport: h.Transport, Address: h.Address, User: h.User, IdentityFile: h.IdentityFile, Via: hostVia(c, server)}
}

// dispatch sends a formula's work to the executors, after its "ready", so
// that in the stream "ready" precedes the executor's "running".
func (e *Engine) dispatch(ctx context.Context, r *run, i int) {
	pf := &r.plan.Formulas[i]
	spec := r.plan.Spec(i)
	c := r.rec.Composition
	d := &events.Dispatch{Ref: e.ref(r, i), Host: hostSpec(c, pf.Server), MaxParallel: pf.MaxParallel, OnFailure: c.OnFailure, Order: pf.Order,
		Limits: c.HostLimits(pf.Server), Priority: c.EffectivePriority(), Timeout: pf.Timeout}
	if r.plan.Operation == dag.OpCreate { // not the delete plan of a rollback
		d.SkipAtTurnAfter = r.rec.SkipAtTurnAfter
	}
	d.Nodes = make([]events.WorkNode, len(pf.Nodes))
	for j := range pf.Nodes {
		pn, n := &pf.Nodes[j], &spec.Nodes[j]
		d.Nodes[j] = events.WorkNode{Name: pn.Name, Command: pn.Command, Check: pn.Check, DependsOn: pn.DependsOn,
			Timeout: n.Timeout, Env: n.Env, Retry: c.NodeRetry(n), SpecHash: pn.SpecHash, AlreadyDone: r.done[pf.ID+"/"+pn.Name],
			NotRetried: r.notRetried(pf.ID, pn.Name), Outputs: n.Outputs}
		d.Nodes[j].Become, d.Nodes[j].BecomeUser = dag.Becomes(n.Become, n.BecomeUser)
		if r.plan.Operation != dag.OpDelete { // a delete leaves the files to the node's delete command
			d.Nodes[j].Files = events.WorkFiles(n.Files)
		}
	}
	d.Diff = c.Diff && r.plan.Operation == dag.OpCheck
	now := e.now()
	e.formulaStarted(r, i, now)
	e.dispatched(r, i, now)
	ctx = r.formulaCtx(ctx, i)
	e.publishFormula(ctx, r, i, dag.FormulaReady, "")
	e.Out.Emit(ctx, events.HostDispatch(pf.Server, c.Hosts[pf.Server].Zone()), d, e.msgID(r, pf.ID, "dispatch"))
}

// gate asks the health-gate to probe a formula's host, after "gating".
func (e *Engine) gate(ctx context.Context, r *run, i int) {
	pf := &r.plan.Formulas[i]
	g := &events.GateRequest{Ref: e.ref(r, i), Host: hostSpec(r.rec.Composition, pf.Server), Gate: *pf.Gate}
	spec := r.plan.Spec(i)
	g.Become, g.BecomeUser = dag.Becomes(spec.Become, spec.BecomeUser)
	ctx = r.formulaCtx(ctx, i)
	e.publishFormula(ctx, r, i, dag.FormulaGating, "")
	e.Out.Emit(ctx, events.HostGate(pf.Server), g, e.msgID(r, pf.ID, "gate"))
}

// stopFormulaWhy publishes formula i stopped (fs) by the planner itself,
// each of its nodes cancelled with the reason nodeReason, and why as the
// formula's error.
func (e *Engine) stopFormulaWhy(ctx context.Context, r *run, i int, fs dag.FormulaState, nodeReason, why string) {
	pf := &r.plan.Formulas[i]
	ctx = r.formulaCtx(ctx, i)
	for j := range pf.Nodes {
		ev := &events.NodeEvent{Ref: e.ref(r, i), Status: dag.NodeCancelled, SpecHash: pf.Nodes[j].SpecHash, Reason: nodeReason}
		ev.Node = pf.Nodes[j].Name
		e.Out.Emit(ctx, events.HostLifecycle(pf.Server), ev, e.msgID(r, pf.ID, ev.Node, string(dag.NodeCancelled)))
	}
	ev := e.formulaEvent(r, i, fs, "")
	ev.Error = why
	e.Out.Emit(ctx, events.HostLifecycle(ev.Ref.Host), ev, e.msgID(r, pf.ID, string(fs)))
}

// stopFormula publishes a blocked or cancelled formula and each of its
// nodes, naming the failed formula behind it.
func (e *Engine) stopFormula(ctx context.Context, r *run, b dag.Blocked, fs dag.FormulaState, ns dag.NodeState) {
	blocker := ""
	if b.Blocker >= 0 {
		blocker = r.plan.Formulas[b.Blocker].ID
	}
	pf := &r.plan.Formulas[b.Formula]
	ctx = r.formulaCtx(ctx, b.Formula)
	for j := range pf.Nodes {
		ev := &events.NodeEvent{Ref: e.ref(r, b.Formula), Status: ns, Blocker: blocker, SpecHash: pf.Nodes[j].SpecHash}
		ev.Node = pf.Nodes[j].Name
		if ns == dag.NodeCancelled {
			ev.Reason = cancelReason(r.plan.OnFailure, blocker)
		}
		e.Out.Emit(ctx, events.HostLifecycle(pf.Server), ev, e.msgID(r, pf.ID, ev.Node, string(ns)))
	}
	e.nodesStopped(r, ns, len(pf.Nodes))
	ev := e.formulaEvent(r, b.Formula, fs, blocker)
	ev.Error = rolloutStop(r, b.Formula) // a rollout past max_failed says so
	e.Out.Emit(ctx, events.HostLifecycle(ev.Ref.Host), ev, e.msgID(r, pf.ID, string(fs)))
}

func (e *Engine) formulaEvent(r *run, i int, st dag.FormulaState, blocker string) *events.FormulaEvent {
	now := e.now()
	ev := &events.FormulaEvent{Ref: e.ref(r, i), Status: st, Blocker: blocker, Run: events.Run{Attempt: r.rec.Generation}}
	switch st {
	case dag.FormulaReady, dag.FormulaGating:
		ev.StartedAt = &now
	default:
		ev.EndedAt = &now
	}
	return ev
}

func (e *Engine) publishFormula(ctx context.Context, r *run, i int, st dag.FormulaState, blocker string) {
	ev := e.formulaEvent(r, i, st, blocker)
	e.Out.Emit(r.formulaCtx(ctx, i), events.HostLifecycle(ev.Ref.Host), ev, e.msgID(r, r.plan.Formulas[i].ID, string(st)))
}

// publishWorkflow announces a workflow transition; by is who asked for it
// (nil for the planner's own). It goes out with the record's next write
// (saveRecord), which every transition makes.
func (e *Engine) publishWorkflow(ctx context.Context, r *run, st dag.WorkflowState, reason string, by *events.Principal) {
	ev := e.workflowEvent(r, st, reason, by)
	r.announce = append(r.announce, Announcement{Subject: events.WorkflowLifecycle(r.rec.ID), Event: ev,
		MsgID: e.msgID(r, "workflow", string(st), strconv.Itoa(r.rec.Requests))})
}

// publishAccepted publishes an accepted run's accepted event, at once: its
// record is written already.
func (e *Engine) publishAccepted(ctx context.Context, r *run, by *events.Principal) {
	ev := e.workflowEvent(r, dag.WorkflowAccepted, "", by)
	at := r.rec.CreatedAt // when it was accepted, however late its event is published
	ev.Run.StartedAt = &at
	ev.Graph = events.GraphOf(r.plan) // what viewers draw
	ev.Vars = dag.ShownVars(r.rec.Composition.ExtraVars)
	// Requests 0: published again by acceptedFirst, maybe after a request.
	e.Out.Emit(r.workflowCtx(ctx), events.WorkflowLifecycle(r.rec.ID), ev, e.msgID(r, "workflow", string(dag.WorkflowAccepted), "0"))
}

// workflowEvent is a workflow transition's event.
func (e *Engine) workflowEvent(r *run, st dag.WorkflowState, reason string, by *events.Principal) *events.WorkflowEvent {
	now := e.now()
	ev := &events.WorkflowEvent{Ref: events.Ref{WorkflowID: r.rec.ID, Workflow: r.rec.Name, Operation: r.rec.Operation, Generation: r.rec.Generation},
		Status: st, Reason: reason, Run: events.Run{Attempt: r.rec.Generation, StartedAt: &now}, RequestedBy: by}
	if st.Terminal() {
		ev.EndedAt = &now
		ev.Error = reason
	}
	ev.Formulas = map[dag.FormulaState]int{}
	for i := range r.plan.Formulas {
		ev.Formulas[r.state.Formula(i)]++
		ev.TotalNodes += len(r.plan.Formulas[i].Nodes)
	}
	return ev
}

// announced publishes the workflow events r's record announces.
func (e *Engine) announced(ctx context.Context, r *run) {
	for _, a := range r.rec.Announce {
		e.Out.Emit(r.workflowCtx(ctx), a.Subject, a.Event, a.MsgID)
	}
}

// ending counts the end of a run among the events in as, and records its
// span: once, by the planner whose record write ended it.
func (e *Engine) ending(ctx context.Context, r *run, as []Announcement) {
	for _, a := range as {
		if st := a.Event.Status; st.Terminal() {
			e.ended = append(e.ended, st)
			e.recordWorkflow(ctx, r, st, a.Event.Reason)
		}
	}
}

// cancelReason says why a node was cancelled before it started.
func cancelReason(policy dag.OnFailure, blocker string) string {
	if blocker == "" {
		return "not started: the workflow was cancelled"
	}
	return "not started: on_failure " + string(policy) + " after " + blocker + " failed"
}

// publishCancelling announces that a cancel was requested and n running
// formulas are being stopped: executors kill them on this event.
func (e *Engine) publishCancelling(ctx context.Context, r *run, n int) {
	now := e.now()
	reason := fmt.Sprintf("cancelling by request: stopping %d running formula(s)", n)
	if r.rec.CancelledBy == nil && r.rec.Expired != "" {
		reason = fmt.Sprintf("%s: stopping %d running formula(s)", r.rec.Expired, n)
	}
	ev := &events.WorkflowEvent{Ref: events.Ref{WorkflowID: r.rec.ID, Workflow: r.rec.Name, Operation: r.rec.Operation, Generation: r.rec.Generation},
		Status: dag.WorkflowRunning, Reason: reason,
		Run: events.Run{Attempt: r.rec.Generation, StartedAt: &now}, RequestedBy: r.rec.CancelledBy, Cancelling: true}
	r.announce = append(r.announce, Announcement{Subject: events.WorkflowLifecycle(r.rec.ID), Event: ev,
		MsgID: e.msgID(r, "workflow", "cancelling", strconv.Itoa(r.rec.Requests))})
}
