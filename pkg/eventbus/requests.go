package eventbus

import (
	"context"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/micro"
)

// HandlerContext is a request handler's context: it ends after limit, or
// sooner, at nine tenths of what the requester said it waits
// (WaitHeader), so that an error it ends with still reaches the
// requester.
func HandlerContext(h micro.Headers, limit time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), HandlerBudget(h, limit))
}

// HandlerBudget is how long HandlerContext gives a handler: limit, or
// nine tenths of what the requester waits when that is less.
func HandlerBudget(h micro.Headers, limit time.Duration) time.Duration {
	if w, err := time.ParseDuration(h.Get(events.WaitHeader)); err == nil && w > 0 {
		limit = min(limit, w*9/10)
	}
	return limit
}

// A person may read the event and log streams, and so may create
// consumers on them; the JetStream API cannot tell a pull consumer from a
// push one by subject, and a push consumer's deliver subject can be any
// subject of the services' account: a control verb, workflow.submit,
// state.rebuild. JetStream then delivers stream messages there, each with
// an acknowledgement subject ($JS.ACK...) as its reply, or none (idle
// heartbeats, flow control). Every endpoint therefore answers requests
// only (OnlyRequests), so reading the streams never amounts to control.

// IsRequest says whether a message with this reply subject is a request
// someone made: it has a reply subject, and not one of JetStream's.
func IsRequest(reply string) bool {
	return reply != "" && !strings.HasPrefix(reply, "$JS.")
}

// OnlyRequests is h for requests, and drops anything else (see IsRequest):
// there is no one to answer, and acting on it would let a stream reader
// control what only its endpoint's callers may.
func OnlyRequests(h micro.Handler) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		if !IsRequest(req.Reply()) {
			return
		}
		h.Handle(req)
	})
}
