package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Run is the planner's run snapshot of a workflow (its gantry_runs
// record), which it writes as soon as it accepts the workflow, and again
// when a retry starts a new run generation. A workflow it has no record
// of is a *RequestError matching ErrNotFound.
func (c *Client) Run(ctx context.Context, id string) (*events.RunSnapshot, error) {
	subject := "$KV." + events.BucketRuns + "." + id
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	kv, err := c.js.KeyValue(ctx, events.BucketRuns)
	if err != nil {
		return nil, &RequestError{Subject: subject, Err: err}
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		err = fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return nil, &RequestError{Subject: subject, Err: err}
	}
	data, err := eventbus.Unpack(e.Value())
	var run events.RunSnapshot
	if err == nil {
		err = json.Unmarshal(data, &run)
	}
	if err != nil {
		return nil, &RequestError{Subject: subject, Err: fmt.Errorf("bad record: %w", err)}
	}
	return &run, nil
}

// StoreSizes are the sizes of the streams and buckets a prune shrinks
// (events.SizedStores), by store; one that cannot be read is left out.
func (c *Client) StoreSizes(ctx context.Context) map[string]events.StoreSize {
	out := map[string]events.StoreSize{}
	for _, st := range events.SizedStores {
		s, err := c.js.Stream(ctx, events.StoreStream(st))
		if err != nil {
			continue
		}
		state := s.CachedInfo().State
		out[st] = events.StoreSize{Messages: state.Msgs, Bytes: state.Bytes}
	}
	return out
}

// WorkflowMessages is how much of stream the messages of the workflows
// ids take (spans: when each was published, events.WorkflowSpan); it
// reads them and removes nothing.
func (c *Client) WorkflowMessages(ctx context.Context, stream string, ids map[string]bool, spans []events.Span) (events.StoreSize, error) {
	sz, err := eventbus.RemoveWorkflowMessages(ctx, c.js, stream, ids, spans, true)
	if err != nil {
		return sz, &RequestError{Subject: stream, Err: err}
	}
	return sz, nil
}
