package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// A state read (events.StateReads) not answered within stateRetryAfter,
// or a third of the client's timeout when that is less, is asked again
// of every state-store replica (events.StateRetry), up to stateTries in
// all, and at once when a replica answers that it cannot read its
// projection now (a 5xx). The first answer to any of the tries is taken,
// until the timeout. A replica that does not answer (stopped, cut off
// from the cluster, its JetStream gone) then costs a read a few seconds,
// not its whole timeout, as it did each time the queue group picked it.
const (
	stateTries      = 3
	stateRetryAfter = 3 * time.Second
)

// stateAsk is one state read in progress.
type stateAsk struct {
	nc      *nats.Conn
	m       *nats.Msg
	retry   string // where tries after the first go
	inbox   string
	tries   int
	timeout time.Duration
}

// askState sends the state read m and returns the first answer, or the
// last 5xx error reply when nothing better came.
func (c *Client) askState(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	a := &stateAsk{nc: c.nc, m: m, retry: events.StateRetry(m.Subject), inbox: c.nc.NewInbox(), timeout: c.timeout}
	replies := make(chan *nats.Msg, 16)
	sub, err := c.nc.ChanSubscribe(a.inbox, replies)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	denied, stop := c.deny.watch()
	defer stop()
	return a.wait(ctx, replies, denied)
}

func (a *stateAsk) wait(ctx context.Context, replies <-chan *nats.Msg, denied <-chan error) (*nats.Msg, error) {
	deadline := time.Now().Add(a.timeout)
	every := min(stateRetryAfter, a.timeout/stateTries)
	if err := a.send(a.m.Subject); err != nil {
		return nil, err
	}
	again := time.NewTimer(every)
	defer again.Stop()
	end := time.NewTimer(a.timeout)
	defer end.Stop()
	var failed *nats.Msg // the last 5xx reply
	for {
		select {
		case r := <-replies:
			switch {
			case r.Header.Get("Status") == "503" && len(r.Data) == 0: // no responders
				if a.tries == 1 {
					return nil, nats.ErrNoResponders
				}
				a.retry = a.m.Subject // state-stores without retry subjects
			case strings.HasPrefix(r.Header.Get(micro.ErrorCodeHeader), "5"):
				failed = r
			default:
				return r, nil
			}
			if err := a.again(deadline); err != nil {
				return nil, err
			}
		case err := <-denied:
			if err := a.denied(err, deadline); err != nil {
				return nil, err
			}
		case <-again.C:
			if err := a.again(deadline); err != nil {
				return nil, err
			}
			again.Reset(every)
		case <-end.C:
			if failed != nil {
				return failed, nil
			}
			return nil, fmt.Errorf("no state-store answered within %s (%d tries): %w", a.timeout, a.tries, nats.ErrTimeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// again asks once more of every replica, while tries and time are left.
func (a *stateAsk) again(deadline time.Time) error {
	if a.tries >= stateTries || time.Until(deadline) < 100*time.Millisecond {
		return nil
	}
	return a.send(a.retry)
}

// denied handles a permission violation: of the retry subject (a server
// whose permissions predate it), the tries go on the read's own subject;
// of the read or the reply inbox, the read is refused.
func (a *stateAsk) denied(err error, deadline time.Time) error {
	msg := err.Error()
	switch {
	case a.retry != a.m.Subject && strings.Contains(msg, `"`+a.retry+`"`):
		a.retry = a.m.Subject
		return a.again(deadline)
	case strings.Contains(msg, `"`+a.m.Subject+`"`):
		return ErrDenied
	case strings.Contains(msg, `"`+a.inbox+`"`):
		return ErrRepliesDenied
	}
	return nil
}

func (a *stateAsk) send(subject string) error {
	h := nats.Header{}
	for k, v := range a.m.Header {
		h[k] = v
	}
	a.tries++
	return a.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: a.inbox, Data: a.m.Data, Header: h})
}
