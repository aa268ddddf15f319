// Package api exposes the planner's request/reply endpoints as a NATS
// micro service, so `nats micro ls` lists it.
package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/planner/internal/engine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// RequestLimit bounds a submit or a control request; a requester that
// says how long it waits (events.WaitHeader, as the CLI does) gets the
// error of one that could not be done (JetStream not answering) before
// it gives up, not after.
const RequestLimit = 30 * time.Second

// Register adds the planner service (version and instance as spec says),
// its status endpoint and its endpoints.
func Register(nc *nats.Conn, spec eventbus.ServiceSpec, e *engine.Engine, log *slog.Logger, start func(id string)) (micro.Service, error) {
	spec.ID = events.Planner
	spec.Description = "gantry planner: validates, plans and accepts compositions, and controls runs"
	spec.Status = func() any {
		return events.PlannerStatus{Instance: spec.Instance, WorkflowsActive: e.Active(), Storage: spec.Storage.Status()}
	}
	svc, err := eventbus.AddService(nc, spec)
	if err != nil {
		return nil, err
	}
	submit := func(validateOnly bool) micro.HandlerFunc {
		return func(req micro.Request) {
			ctx, cancel := eventbus.HandlerContext(req.Headers(), SubmitBudget)
			defer cancel()
			data, err := eventbus.BodyOf(&nats.Msg{Data: req.Data(), Header: nats.Header(req.Headers())})
			if err != nil {
				_ = req.Error("400", "bad request body: "+err.Error(), nil)
				return
			}
			ctx = eventbus.ExtractTrace(ctx, nats.Header(req.Headers())) // the submitter's trace, continued by the workflow
			reply, err := e.Submit(ctx, data, validateOnly, principal(req))
			if err != nil {
				log.Error("submit failed", "err", err)
				code, what := "500", "submit failed: "
				if eventbus.IsStorage(err) {
					code, what = "503", "not accepted, nothing will run: "
				}
				_ = req.Error(code, what+err.Error(), nil)
				return
			}
			if reply.Status == "rejected" {
				body, _ := json.Marshal(reply)
				_ = req.Error("400", "composition rejected: "+strconv.Itoa(len(reply.Errors))+" problem(s)", body)
				return
			}
			body, packed, err := eventbus.EncodeBody(reply)
			if err != nil && reply.Status == "accepted" {
				// Checked before it was stored (engine's replyFits), so
				// not expected: the workflow runs all the same, and the
				// answer says so, not that the submission failed.
				start(reply.WorkflowID)
				_ = req.Error("500", "workflow "+reply.WorkflowID+" is accepted and runs, but its reply (the plan) cannot be sent: "+err.Error(), nil)
				return
			}
			if err != nil {
				_ = req.Error("500", "reply: "+err.Error(), nil)
				return
			}
			if packed {
				_ = req.Respond(body, micro.WithHeaders(micro.Headers{eventbus.EncodingHeader: {eventbus.EncodingGzip}}))
			} else {
				_ = req.Respond(body)
			}
			if reply.Status == "accepted" {
				start(reply.WorkflowID)
			}
		}
	}
	if err := svc.AddEndpoint("submit", eventbus.OnlyRequests(submit(false)), micro.WithEndpointSubject(events.SubjectSubmit)); err != nil {
		return nil, err
	}
	if err := svc.AddEndpoint("validate", eventbus.OnlyRequests(submit(true)), micro.WithEndpointSubject(events.SubjectValidate)); err != nil {
		return nil, err
	}
	if err := svc.AddEndpoint("prune", eventbus.OnlyRequests(prune(e, log)), micro.WithEndpointSubject(events.SubjectPrune)); err != nil {
		return nil, err
	}
	for _, verb := range []string{events.VerbCancel, events.VerbPause, events.VerbResume, events.VerbRetry} {
		if err := svc.AddEndpoint(verb, eventbus.OnlyRequests(control(e, log, start)), micro.WithEndpointSubject("workflow.*."+verb)); err != nil {
			return nil, err
		}
	}
	return svc, nil
}

// SubmitBudget bounds how long the planner takes to answer a submission,
// well inside the CLI's 30 s: past it, the answer is an error (naming
// storage when JetStream did not store the workflow) and nothing runs,
// never a reply nobody waits for any more and a run nobody expects.
const SubmitBudget = 20 * time.Second

// control answers a control verb. A request that failed for another
// reason than what it asks or finds (NATS away, a write without an
// answer) may have taken effect in part: its record written, what it
// decided not yet sent. The workflow is handed to start, which loads it
// until it can (a new generation is begun again, what its record
// announces is published), so it does not wait for the next event or
// restart, and the answer says so.
func control(e *engine.Engine, log *slog.Logger, start func(id string)) micro.HandlerFunc {
	return func(req micro.Request) {
		sub, err := events.ParseSubject(req.Subject())
		if err != nil || sub.Kind != events.KindWorkflowControl {
			_ = req.Error("400", "bad control subject "+req.Subject(), nil)
			return
		}
		body, err := events.ParseControlRequest(sub.Verb, req.Data())
		if err != nil {
			_ = req.Error("400", err.Error(), nil)
			return
		}
		ctx, cancel := eventbus.HandlerContext(req.Headers(), RequestLimit)
		defer cancel()
		reply, err := e.ControlRequest(ctx, sub.WorkflowID, sub.Verb, body, principal(req))
		switch {
		case errors.Is(err, engine.ErrNotFound):
			_ = req.Error("404", err.Error(), nil)
		case errors.Is(err, engine.ErrConflict):
			_ = req.Error("409", err.Error(), nil)
		case err != nil:
			log.Error("control failed", "workflow_id", sub.WorkflowID, "verb", sub.Verb, "err", err)
			_ = req.Error("500", err.Error()+"; it may have taken effect in part: the planner carries out what it recorded (gantry status shows the workflow)", nil)
			go start(sub.WorkflowID) // after the answer: a start waits for the planner's work in hand
		default:
			b, _ := json.Marshal(reply)
			_ = req.Respond(b)
		}
	}
}

// prune answers workflow.prune: an operator's gantry prune.
func prune(e *engine.Engine, log *slog.Logger) micro.HandlerFunc {
	return func(req micro.Request) {
		body, err := eventbus.BodyOf(&nats.Msg{Data: req.Data(), Header: nats.Header(req.Headers())})
		if err != nil {
			_ = req.Error("400", "bad request body: "+err.Error(), nil)
			return
		}
		pr, age, err := events.ParsePruneRequest(body)
		if err != nil {
			_ = req.Error("400", err.Error(), nil)
			return
		}
		by := principal(req)
		rule := engine.PruneRule{OlderThan: age, DryRun: pr.DryRun, By: &by, Reason: "gantry prune"}
		if pr.OlderThan != "" {
			rule.Reason += " --older-than " + pr.OlderThan
		}
		if pr.Keep != nil {
			rule.Keep, rule.HasKeep = *pr.Keep, true
			rule.Reason += " --keep " + strconv.Itoa(*pr.Keep)
		}
		// A prune of many runs reads and deletes a lot: the client waits
		// as long as it was told to.
		ctx, cancel := eventbus.HandlerContext(req.Headers(), 10*time.Minute)
		defer cancel()
		reply, err := e.Prune(ctx, rule)
		if err != nil {
			log.Error("prune failed", "err", err)
			_ = req.Error("500", "prune failed: "+err.Error(), nil)
			return
		}
		b, packed, err := eventbus.EncodeBody(reply)
		if err != nil {
			_ = req.Error("500", "reply: "+err.Error(), nil)
			return
		}
		if packed {
			_ = req.Respond(b, micro.WithHeaders(micro.Headers{eventbus.EncodingHeader: {eventbus.EncodingGzip}}))
		} else {
			_ = req.Respond(b)
		}
	}
}

// principal is who sent req, from the header the NATS server sets.
func principal(req micro.Request) events.Principal {
	return events.PrincipalFrom(req.Headers().Get(events.RequestInfoHeader))
}
