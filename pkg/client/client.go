// Package client is the gantry bus API as typed calls: the planner's and
// the state-store's request/reply endpoints (submit, validate, control,
// prune, the state reads, rebuild), the services' ping, and following a
// stream. The gantry CLI and its web view use it; so can any program that
// drives gantry.
package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// Client makes requests over one NATS connection. It learns of the
// permission violations the server reports on that connection, so that a
// request this identity may not make fails at once (ErrDenied) instead of
// waiting out its timeout. A Client is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	timeout time.Duration
	deny    *denials
}

// New is a client over nc whose requests each wait up to timeout for
// their reply (and say so to the service: events.WaitHeader). It chains
// nc's error handler to watch for permission violations: make one client
// per connection (WithTimeout for other timeouts).
func New(nc *nats.Conn, timeout time.Duration) *Client {
	d := &denials{waiting: map[int]chan<- error{}}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			d.tell(err)
		}
		if prev != nil {
			prev(c, s, err)
		}
	})
	js, _ := jetstream.New(nc) // without options it cannot fail
	return &Client{nc: nc, js: js, timeout: timeout, deny: d}
}

// WithTimeout is the client with another wait for each reply; it shares
// the connection and what it learns of permission violations.
func (c *Client) WithTimeout(d time.Duration) *Client {
	cp := *c
	cp.timeout = d
	return &cp
}

// Conn is the client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Timeout is how long each request waits for its reply.
func (c *Client) Timeout() time.Duration { return c.timeout }

// denials hands the server's permission violations to every request
// waiting at the time.
type denials struct {
	mu      sync.Mutex
	next    int
	waiting map[int]chan<- error
}

// watch registers a waiter; stop unregisters it.
func (d *denials) watch() (<-chan error, func()) {
	ch := make(chan error, 16)
	d.mu.Lock()
	id := d.next
	d.next++
	d.waiting[id] = ch
	d.mu.Unlock()
	return ch, func() {
		d.mu.Lock()
		delete(d.waiting, id)
		d.mu.Unlock()
	}
}

func (d *denials) tell(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ch := range d.waiting {
		select {
		case ch <- err:
		default:
		}
	}
}

// Request sends body to subject with headers h (may be nil) and decodes
// the reply into out (nil: the reply is not read). A service's error
// reply is a *ServiceError; no usable reply, a *RequestError. A state
// read (events.StateReads) not answered soon is asked again of every
// state-store replica (see askState).
func (c *Client) Request(ctx context.Context, subject string, body []byte, h nats.Header, out any) error {
	if h == nil {
		h = nats.Header{}
	}
	h.Set(events.WaitHeader, c.timeout.String())
	m := &nats.Msg{Subject: subject, Data: body, Header: h}
	if err := packRequest(m); err != nil {
		return &RequestError{Subject: subject, Err: err}
	}
	ask := c.requestOrDenied
	if events.StateRetry(subject) != "" {
		ask = c.askState
	}
	msg, err := ask(ctx, m)
	if err != nil {
		return &RequestError{Subject: subject, Err: err}
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &ServiceError{Subject: subject, Code: code, Description: msg.Header.Get(micro.ErrorHeader), Body: msg.Data}
	}
	if out == nil {
		return nil
	}
	data, err := eventbus.BodyOf(msg)
	if err == nil {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		return &RequestError{Subject: subject, Err: fmt.Errorf("bad reply: %w", err)}
	}
	return nil
}

// requestJSON is Request with q as JSON.
func (c *Client) requestJSON(ctx context.Context, subject string, q, out any) error {
	body, err := json.Marshal(q)
	if err != nil {
		return &RequestError{Subject: subject, Err: err}
	}
	return c.Request(ctx, subject, body, nil, out)
}

// inbox is the prefix of the connection's reply subjects.
func (c *Client) inbox() string {
	return cmp.Or(c.nc.Opts.InboxPrefix, strings.TrimSuffix(nats.InboxPrefix, "."))
}

// requestOrDenied is a request that returns ErrDenied as soon as the
// server refuses the publish, or the reply's subscription (a viewer on an
// operator's inbox prefix), instead of waiting out the timeout.
func (c *Client) requestOrDenied(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	subject, inbox := m.Subject, c.inbox()
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, nats.ErrTimeout)
	defer cancel()
	ctx, deny := context.WithCancelCause(ctx)
	defer deny(nil)
	denied, stop := c.deny.watch()
	defer stop()
	go func() {
		for {
			select {
			case err := <-denied:
				switch msg := err.Error(); {
				case strings.Contains(msg, `"`+subject+`"`):
					deny(ErrDenied)
					return
				case strings.Contains(msg, `"`+inbox+`.`):
					deny(ErrRepliesDenied)
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	msg, err := c.nc.RequestMsgWithContext(ctx, m)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrDenied) {
		return nil, cause
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, nats.ErrTimeout
	}
	return msg, err
}

// packRequest compresses a large request body (a fleet's composition), as
// the services' replies are.
func packRequest(m *nats.Msg) error {
	data, packed, err := eventbus.Pack(m.Data)
	if err != nil {
		return fmt.Errorf("the request is %w", err)
	}
	if packed {
		m.Data = data
		m.Header.Set(eventbus.EncodingHeader, eventbus.EncodingGzip)
	}
	return nil
}

// Close closes the client's connection.
func (c *Client) Close() { c.nc.Close() }
