package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
)

// Submit sends a composition (YAML or JSON, as a file holds it) to the
// planner, with headers h (a trace's traceparent; may be nil). A rejected
// composition is a *ServiceError with code 400 whose Body is the
// SubmitReply listing its problems (Rejected reads it).
func (c *Client) Submit(ctx context.Context, composition []byte, h nats.Header) (events.SubmitReply, error) {
	var reply events.SubmitReply
	err := c.Request(ctx, events.SubjectSubmit, composition, h, &reply)
	return reply, err
}

// Validate asks the planner to check and plan a composition without
// running it.
func (c *Client) Validate(ctx context.Context, composition []byte) (events.SubmitReply, error) {
	var reply events.SubmitReply
	err := c.Request(ctx, events.SubjectValidate, composition, nil, &reply)
	return reply, err
}

// Rejected is the SubmitReply a rejection (a 400 from submit, validate,
// or state.drift's composition check) carries, when err is one.
func Rejected(err error) (events.SubmitReply, bool) {
	var se *ServiceError
	var reply events.SubmitReply
	if !errors.As(err, &se) || decodeBody(se.Body, &reply) != nil {
		return reply, false
	}
	return reply, true
}

// Control asks the planner to cancel, pause, resume or retry a workflow
// (verb: events.VerbCancel...); q names the nodes of a retry or a cancel
// of some nodes (nil: all of it).
func (c *Client) Control(ctx context.Context, id, verb string, q *events.ControlRequest) (events.ControlReply, error) {
	var reply events.ControlReply
	if !validVerb(verb) {
		return reply, &RequestError{Subject: events.WorkflowControl(id, verb), Err: fmt.Errorf("%q is not a control verb", verb)}
	}
	var body []byte
	if q != nil {
		var err error
		if body, err = marshal(q); err != nil {
			return reply, err
		}
	}
	err := c.Request(ctx, events.WorkflowControl(id, verb), body, nil, &reply)
	return reply, err
}

func validVerb(verb string) bool {
	switch verb {
	case events.VerbCancel, events.VerbPause, events.VerbResume, events.VerbRetry:
		return true
	}
	return false
}

// Prune asks the planner to remove finished workflows.
func (c *Client) Prune(ctx context.Context, q events.PruneRequest) (events.PruneReply, error) {
	var reply events.PruneReply
	err := c.requestJSON(ctx, events.SubjectPrune, q, &reply)
	return reply, err
}

// Status is state.workflow: the state-store's document of a workflow; a
// workflow it does not know is a *ServiceError matching ErrNotFound.
func (c *Client) Status(ctx context.Context, id string) (*events.WorkflowDoc, error) {
	var doc events.WorkflowDoc
	if err := c.requestJSON(ctx, events.StateWorkflow, events.WorkflowQuery{WorkflowID: id}, &doc); err != nil {
		return nil, err
	}
	return &doc, nil
}

// List is state.list: the newest workflows first, up to limit.
func (c *Client) List(ctx context.Context, limit int) ([]events.WorkflowSummary, error) {
	var rows []events.WorkflowSummary
	err := c.requestJSON(ctx, events.StateList, events.ListQuery{Limit: limit}, &rows)
	return rows, err
}

// Host is state.host: the nodes done on a host across compositions (every
// host's with host "").
func (c *Client) Host(ctx context.Context, host string) ([]events.HostNode, error) {
	var nodes []events.HostNode
	err := c.requestJSON(ctx, events.StateHost, events.HostQuery{Host: host}, &nodes)
	return nodes, err
}

// Drift is state.drift: the state-store compares the nodes a
// composition's plan wants (rendered here, by whoever loaded it) with
// what its records say was done.
func (c *Client) Drift(ctx context.Context, p *dag.Plan) (events.DriftReport, error) {
	var rep events.DriftReport
	err := c.requestJSON(ctx, events.StateDrift, events.DriftQueryOf(p), &rep)
	return rep, err
}

// Rebuild is state.rebuild: the state-store rebuilds its projection from
// the event stream (or, with CheckOnly, says what a rebuild would change).
func (c *Client) Rebuild(ctx context.Context, q events.RebuildQuery) (events.RebuildReport, error) {
	var rep events.RebuildReport
	err := c.requestJSON(ctx, events.StateRebuild, q, &rep)
	return rep, err
}

// Ping asks a service (by its micro name: gantry-planner) whether any
// instance of it runs; nats.ErrNoResponders when none does.
func (c *Client) Ping(ctx context.Context, service string) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	_, err := c.nc.RequestWithContext(ctx, "$SRV.PING."+service, nil)
	return err
}

// JetStream asks the server for the account's JetStream: an error when it
// has none, or does not answer.
func (c *Client) JetStream(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if _, err := c.js.AccountInfo(ctx); err != nil {
		return &RequestError{Subject: "$JS.API.INFO", Err: err}
	}
	return nil
}

// Stats asks every instance of the services (by their micro names:
// gantry-planner) for its micro stats, and returns those that answer
// within statsFirst, and within statsMore of the one before: instances
// that do not answer are not waited for.
func (c *Client) Stats(ctx context.Context, services []string) ([][]byte, error) {
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, &RequestError{Subject: inbox, Err: err}
	}
	defer func() { _ = sub.Unsubscribe() }()
	for _, s := range services {
		if err := c.nc.PublishRequest("$SRV.STATS."+s, inbox, nil); err != nil {
			return nil, &RequestError{Subject: "$SRV.STATS." + s, Err: err}
		}
	}
	var stats [][]byte
	for wait := statsFirst; ; wait = statsMore {
		mctx, cancel := context.WithTimeout(ctx, wait)
		msg, err := sub.NextMsgWithContext(mctx)
		cancel()
		if err != nil {
			return stats, nil
		}
		stats = append(stats, msg.Data)
	}
}

// How long Stats waits for the first answer, and for each one more.
const (
	statsFirst = 500 * time.Millisecond
	statsMore  = 250 * time.Millisecond
)
