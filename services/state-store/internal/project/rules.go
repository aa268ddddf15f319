package project

import (
	"context"
	"slices"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"go.opentelemetry.io/otel/trace"
)

// The projection's rules: how one event changes the document it is about.
// Each folds an event into a document and says whether it changed it; a
// document it leaves as it is, it does not touch. None reads or writes a
// store: the Projector reads the documents, folds, and writes what
// changed.

// newWorkflowDoc is the summary of a workflow nothing of which is
// projected yet.
func newWorkflowDoc(ev *consume.Event, r events.Ref) *events.WorkflowDoc {
	return &events.WorkflowDoc{WorkflowID: r.WorkflowID, Workflow: r.Workflow, Operation: r.Operation, Status: dag.WorkflowAccepted,
		Generation: r.Generation, CreatedAt: ev.Time}
}

// workflowPages is the page count (Pages) of a workflow whose summary w
// creates: by the plan's size, which its accepted event (the planner's
// first) carries, else DefaultPages. It is never changed after.
func workflowPages(w *events.WorkflowEvent) int {
	if n := sum(w.Formulas); w.Status == dag.WorkflowAccepted && n > 0 {
		return PagesFor(n, w.TotalNodes)
	}
	return DefaultPages
}

// foldWorkflow applies a workflow transition that is not behind the
// workflow's state (dag.CompareWorkflow): a late running or paused of a
// run that has ended, or an event of an earlier generation, changes
// nothing; nor does an event applied already (its stream sequence, or
// its id: a copy stored again).
func foldWorkflow(doc *events.WorkflowDoc, ev *consume.Event, w *events.WorkflowEvent) bool {
	if ev.Stream <= doc.LastSeq || slices.Contains(doc.EventIDs, ev.ID) {
		return false // applied already, or a copy of one applied
	}
	if dag.CompareWorkflow(dag.WorkflowMark{Generation: doc.Generation, State: doc.Status}, w.Mark()) == dag.Behind {
		return false
	}
	doc.LastSeq, doc.UpdatedAt, doc.Generation = ev.Stream, ev.Time, w.Generation
	doc.EventIDs = append(doc.EventIDs, ev.ID)
	if n := len(doc.EventIDs); n > events.MaxWorkflowEventIDs {
		doc.EventIDs = append([]string(nil), doc.EventIDs[n-events.MaxWorkflowEventIDs:]...)
	}
	doc.Status = w.Status
	doc.Error = w.Error
	doc.EndedAt = w.EndedAt
	if w.Status == dag.WorkflowAccepted {
		doc.CreatedAt, doc.Vars = ev.Time, dag.ShownVars(w.Vars) // masked again: whoever published it
		if w.StartedAt != nil && w.StartedAt.Before(ev.Time) {
			doc.CreatedAt = *w.StartedAt // accepted then, its event stored later (published again)
		}
		doc.TraceID = traceID(ev)
	}
	if n := sum(w.Formulas); n > 0 {
		doc.FormulaCount, doc.NodeCount = n, w.TotalNodes
	}
	recordRequest(doc, ev, w)
	return true
}

// newFormulaDoc is the document of a formula nothing of which is
// projected yet.
func newFormulaDoc(r events.Ref) *events.FormulaDoc {
	return &events.FormulaDoc{Host: r.Host, Status: dag.FormulaPending, Generation: r.Generation}
}

// advanceFormula moves a formula's document to an event about it (its
// stream sequence and generation); false, the document untouched, when
// the event was applied already or belongs to an older generation.
func advanceFormula(f *events.FormulaDoc, ev *consume.Event, r events.Ref) bool {
	if ev.Stream <= f.LastSeq || r.Generation < f.Generation {
		return false
	}
	f.LastSeq, f.Generation = ev.Stream, r.Generation
	return true
}

// foldFormula applies a formula transition that is not behind the
// formula's state (dag.CompareFormula): a running stored again after the
// formula ended, or the planner's word that no executor has taken its
// work (ready) stored after an executor took it, changes nothing. f is
// the formula's document, nil when there is none yet; it returns the
// document to write.
func foldFormula(f *events.FormulaDoc, ev *consume.Event, e *events.FormulaEvent) (*events.FormulaDoc, bool) {
	if f != nil && dag.CompareFormula(dag.FormulaMark{Generation: f.Generation, State: f.Status}, e.Mark()) == dag.Behind {
		return f, false
	}
	if f == nil {
		f = newFormulaDoc(e.Ref)
	}
	if !advanceFormula(f, ev, e.Ref) {
		return f, false
	}
	f.Status, f.Blocker, f.Error = e.Status, e.Blocker, e.Error
	if e.Status == dag.FormulaRunning || (f.StartedAt == nil && e.StartedAt != nil) {
		f.StartedAt = e.StartedAt
	}
	if e.EndedAt != nil {
		f.EndedAt = e.EndedAt
	}
	return f, true
}

// foldHealth keeps a formula's last health check. f is the formula's
// document, nil when there is none yet.
func foldHealth(f *events.FormulaDoc, ev *consume.Event, h *events.HealthEvent) (*events.FormulaDoc, bool) {
	if f == nil {
		f = newFormulaDoc(h.Ref)
	}
	if !advanceFormula(f, ev, h.Ref) {
		return f, false
	}
	f.Health = &events.HealthDoc{Status: h.Status, Attempts: h.Attempt, Final: h.Final, Output: h.OutputTail, Error: h.Error, ExitCode: h.ExitCode}
	return f, true
}

// onOtherHost says whether a node event is about another host than its
// formula runs on, as the formula's document (made from the planner's
// first event of it; nil: none yet) records.
func onOtherHost(f *events.FormulaDoc, r events.Ref) bool {
	return f != nil && f.Host != "" && f.Host != r.Host
}

// lateForFormula says whether a node event is of an older generation
// than its formula (f, nil when there is none yet) has reached.
func lateForFormula(f *events.FormulaDoc, e *events.NodeEvent) bool {
	return f != nil && e.Generation < f.Generation
}

// foldNode applies a node transition that is not behind the node's last
// one (dag.CompareNode): a running stored after the attempt's end, or a
// late event of an earlier attempt or generation, changes nothing; one at
// the same place (stored twice, or an attempt announced again) updates
// what it says but is not counted again. n is the node's document, nil
// when there is none yet.
func foldNode(n *events.NodeDoc, ev *consume.Event, e *events.NodeEvent) (*events.NodeDoc, bool) {
	if n == nil {
		n = &events.NodeDoc{Status: dag.NodePending}
	}
	if ev.Stream <= n.LastSeq {
		return n, false
	}
	mark := e.Mark()
	order := dag.CompareNode(n.LastMark(), mark)
	if order == dag.Behind {
		return n, false // late, or stored again: the node has moved on
	}
	n.LastSeq, n.Generation, n.Mark = ev.Stream, e.Generation, &mark
	if order != dag.Same { // the same place again is not a transition
		n.Transitions++
	}
	n.Operation = e.Operation
	if e.Status == dag.NodeRunning && order != dag.Same && (e.Attempt != n.LastAttempt || n.Status != dag.NodeRunning) {
		// A new attempt. (One announced again, as while it waits for its
		// host lock, is the same attempt.)
		n.Attempts++
		n.LastAttempt = e.Attempt
		n.StartedAt, n.EndedAt, n.ExitCode, n.Error, n.Progress, n.Files = e.StartedAt, nil, nil, "", 0, nil
	}
	if n.StartedAt == nil && e.StartedAt != nil {
		// The attempt's start, after a running that announced it without
		// one (it waited for a slot).
		n.StartedAt = e.StartedAt
	}
	if e.Files != nil {
		n.Files = e.Files
	}
	if e.EndedAt != nil {
		n.EndedAt = e.EndedAt
	}
	n.Status = e.Status
	if e.WillRetry { // failed, but the node is still at work
		n.Status = dag.NodeRunning
	}
	if e.ExitCode != nil {
		n.ExitCode = e.ExitCode
	}
	if e.Error != "" {
		n.Error = e.Error
	}
	n.Blocker, n.Check, n.Reason = e.Blocker, e.Check, e.Reason
	if e.SpecHash != "" {
		n.SpecHash = e.SpecHash
	}
	if e.Status == dag.NodeSucceeded { // what this run handed on (secret ones by name)
		n.Outputs, n.SecretOutputs = e.Outputs, e.SecretOutputs
	}
	return n, true
}

// foldProgress keeps a node's last reported percent, of its attempt while
// it runs only: one of an earlier attempt or generation, one stored after
// the attempt ended, or one already applied, is ignored, and so is one
// of a node nothing of which is projected yet (n nil: its running comes
// first). It is not a transition: the counts stay as they are.
func foldProgress(n *events.NodeDoc, ev *consume.Event, e *events.ProgressEvent) bool {
	if n == nil {
		return false
	}
	if m := n.LastMark(); ev.Stream <= n.LastSeq || m.State != dag.NodeRunning || e.Generation != m.Generation || e.Attempt != m.Attempt {
		return false // not of the attempt running now (one stored after its end)
	}
	n.LastSeq, n.Progress = ev.Stream, e.Percent
	return true
}

// foldHostNode applies a node transition to the node's per-host record
// (hn, nil when there is none yet): its last state, operation, spec hash,
// times, actor, blocker, what a create put in place, the last check and
// the last events.MaxHostLog transitions. It returns the record to write.
func foldHostNode(hn *events.HostNode, ev *consume.Event, e *events.NodeEvent) (*events.HostNode, bool) {
	if hn == nil || hn.Host != e.Ref.Host {
		// None yet, or one of another host whose name has the same host
		// token (a composition that renamed web_1 to web.1): this host's
		// record starts here.
		hn = &events.HostNode{Host: e.Ref.Host, Workflow: e.Workflow, Formula: e.Formula, Node: e.Node, Status: dag.NodePending}
	}
	if ev.Stream <= hn.LastSeq {
		return hn, false
	}
	order := dag.CompareNode(lastOf(hn, e.WorkflowID), e.Mark())
	if order == dag.Behind || order == dag.Same && !lastIsOf(hn, e.WorkflowID) {
		return hn, false // late, or stored again: the workflow's run of the node (or the node) has moved on
	}
	hn.LastSeq = ev.Stream
	if e.Operation == dag.OpCheck {
		check(hn, e)
	} else {
		transition(hn, e)
	}
	if order == dag.Same {
		return hn, true // not a transition of its own: not logged again
	}
	hn.Log = append(hn.Log, events.HostLogEntry{Time: ev.Time, Event: ev.Type, WorkflowID: e.WorkflowID, Operation: e.Operation, Status: e.Status, Attempt: e.Attempt, Error: e.Error,
		Generation: e.Generation, WillRetry: e.WillRetry && e.Status == dag.NodeFailed})
	if len(hn.Log) > events.MaxHostLog {
		hn.Log = append([]events.HostLogEntry(nil), hn.Log[len(hn.Log)-events.MaxHostLog:]...)
	}
	return hn, true
}

// recordRequest keeps who asked for a transition: the submitter, and each
// control request (workflowDoc has already skipped a redelivery).
func recordRequest(doc *events.WorkflowDoc, ev *consume.Event, w *events.WorkflowEvent) {
	if w.RequestedBy == nil {
		return
	}
	if w.Status == dag.WorkflowAccepted {
		doc.SubmittedBy = w.RequestedBy
		return
	}
	doc.Requests = append(doc.Requests, events.Request{Status: w.Status, Reason: w.Reason, By: *w.RequestedBy, At: ev.Time})
}

func sum(m map[events.FormulaState]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// lastOf is where workflow id's last transition of a host node stands,
// from its log (the zero mark when the log has none of it: everything of
// it is ahead). Transitions of different workflows follow the stream's
// order.
func lastOf(hn *events.HostNode, id string) dag.NodeMark {
	for i := len(hn.Log) - 1; i >= 0; i-- {
		if hn.Log[i].WorkflowID == id {
			return hn.Log[i].Mark()
		}
	}
	return dag.NodeMark{}
}

// lastIsOf says whether a host node's last transition is workflow id's.
func lastIsOf(hn *events.HostNode, id string) bool {
	return len(hn.Log) > 0 && hn.Log[len(hn.Log)-1].WorkflowID == id
}

// check records a transition of an operation: check run: what the check
// found, apart from the node's create and delete transitions, since it
// did nothing to the node.
func check(hn *events.HostNode, e *events.NodeEvent) {
	c := &events.HostCheck{Status: e.Status, Result: e.Check, SpecHash: e.SpecHash, WorkflowID: e.WorkflowID, EndedAt: e.EndedAt, Error: e.Error}
	if e.WillRetry {
		c.Status = dag.NodeRunning
	}
	if c.Status != dag.NodeSucceeded {
		c.Result = "" // a verdict comes only with succeeded
	}
	hn.Check = c
}

// transition applies a create or delete transition.
func transition(hn *events.HostNode, e *events.NodeEvent) {
	prev := hn.Status
	// Every transition counts: a node blocked or cancelled shows so.
	hn.Status, hn.Blocker = e.Status, e.Blocker
	if e.WillRetry { // failed, but the node is still at work
		hn.Status = dag.NodeRunning
	}
	// Of the workflow that made the transition, whoever published it (the
	// planner blocks and cancels nodes that never started: no actor).
	hn.Operation, hn.WorkflowID, hn.Actor = e.Operation, e.WorkflowID, e.Actor
	if e.SpecHash != "" {
		hn.SpecHash = e.SpecHash
	}
	switch {
	case e.Status == dag.NodeRunning:
		// A running without a start of its own (an attempt announced
		// again, waiting for its host lock) keeps the attempt's.
		if e.StartedAt != nil || prev != dag.NodeRunning {
			hn.StartedAt = e.StartedAt
		}
		hn.EndedAt = nil
	case (e.Status == dag.NodeBlocked || e.Status == dag.NodeCancelled) && prev != dag.NodeRunning:
		// It did not start: the times are this transition's own.
		hn.StartedAt, hn.EndedAt = e.StartedAt, e.EndedAt
	default:
		if e.StartedAt != nil {
			hn.StartedAt = e.StartedAt
		}
		if e.EndedAt != nil {
			hn.EndedAt = e.EndedAt
		}
	}
	inPlace(hn, e)
}

// inPlace keeps what a create left on the host: set by a create that
// completed the node, removed by a create or delete that runs it again,
// fails or deletes it. A node blocked or cancelled before it started was
// not touched (one cancelled while running was: its running removed it),
// nor was one whose attempt started nothing (NotStarted: it waited for a
// slot, or its host could not be reached).
func inPlace(hn *events.HostNode, e *events.NodeEvent) {
	switch {
	case e.Status == dag.NodeBlocked || e.Status == dag.NodeCancelled || e.NotStarted:
	case e.Operation == dag.OpCreate && e.Status.Done():
		hn.InPlace = &events.InPlace{Status: e.Status, SpecHash: hn.SpecHash, WorkflowID: e.WorkflowID, EndedAt: hn.EndedAt}
	default:
		hn.InPlace = nil
	}
}

// traceID is the trace id an event's traceparent names ("" for none).
func traceID(ev *consume.Event) string {
	sc := trace.SpanContextFromContext(eventbus.ExtractTrace(context.Background(), ev.Header))
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}
