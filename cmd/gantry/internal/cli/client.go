package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/spf13/cobra"
)

// connFlags are the flags of every command that talks to NATS.
type connFlags struct {
	opts    natsconn.Options
	timeout time.Duration
}

func (c *connFlags) add(cmd *cobra.Command) {
	c.addConn(cmd)
	cmd.Flags().DurationVar(&c.timeout, "timeout", defaultReplyTimeout, "how long to wait for a reply")
}

// defaultReplyTimeout is how long a request waits for its reply.
const defaultReplyTimeout = 30 * time.Second

// addConn adds the flags of the connection alone, for a command whose
// --timeout means something else: its requests wait defaultReplyTimeout.
func (c *connFlags) addConn(cmd *cobra.Command) {
	c.timeout = defaultReplyTimeout
	connOf.Store(cmd, c)
	cmd.Flags().StringVarP(&c.opts.URL, "server", "s", "", "NATS URL (default $NATS_URL, else the context's, else "+natsconn.DefaultURL+")")
	fs := flag.NewFlagSet("conn", flag.ContinueOnError)
	c.opts.RegisterCredentials(fs)
	cmd.Flags().AddGoFlagSet(fs)
}

// connect connects with the flags, the nats CLI's environment and
// context; with no credentials at all, to a `gantry dev` on this machine
// as its operator.
func (c *connFlags) connect() (*nats.Conn, error) { return c.dial("") }

// connectOperator is connect for what only an operator may do (submit,
// control, rebuild): its replies come to the operator's own inbox prefix,
// which a viewer may not subscribe to, so no viewer reads a plan's
// commands. A prefix the flags' context names is kept.
func (c *connFlags) connectOperator() (*nats.Conn, error) {
	return c.dial(events.Operator.InboxPrefix())
}

// dial connects; inbox is the reply prefix when the context names none
// ("": the nats default).
func (c *connFlags) dial(inbox string) (*nats.Conn, error) {
	o, err := c.opts.Resolved(os.Getenv)
	if err != nil {
		return nil, &exitError{code: ExitUsage, err: err}
	}
	if o.InboxPrefix == "" {
		o.InboxPrefix = inbox
	}
	if !o.HasCredentials() {
		o.NKey = devOperatorKey(o.URL)
	}
	nc, err := natsconn.Connect(o, "gantry-cli", quietLogger(), false)
	if err == nil {
		watchDenials(nc)
	}
	if err != nil {
		code := ExitProblem
		if errors.Is(err, natsconn.ErrBadOptions) {
			code = ExitUsage
		}
		return nil, &exitError{code: code, err: fmt.Errorf("%w (is `gantry dev` running? set --server or NATS_URL, and --creds or --nkey)", err)}
	}
	return nc, nil
}

// serviceError is a micro service's error reply.
type serviceError struct {
	Code        string
	Description string
	Body        []byte
}

func (e *serviceError) Error() string { return e.Description }

// request sends a request and decodes the reply into out. A micro error
// reply comes back as *serviceError.
func request(nc *nats.Conn, subject string, body []byte, timeout time.Duration, out any) error {
	return requestWith(nc, subject, body, nil, timeout, out)
}

// requestWith is request with headers (the submit's trace context). Each
// request says how long it waits (events.WaitHeader), so a service that
// cannot do it answers why before then; a state read is asked again of
// every state-store replica when its first try is not answered soon
// (askState).
func requestWith(nc *nats.Conn, subject string, body []byte, h nats.Header, timeout time.Duration, out any) error {
	if h == nil {
		h = nats.Header{}
	}
	h.Set(events.WaitHeader, timeout.String())
	m := &nats.Msg{Subject: subject, Data: body, Header: h}
	ask := requestOrDenied
	if events.StateRetry(subject) != "" {
		ask = askState
	}
	msg, err := ask(nc, m, timeout)
	if errors.Is(err, errDenied) {
		return &exitError{code: ExitProblem, err: fmt.Errorf("%s: not allowed for this identity (the NATS server refused the request); connect as an operator with --creds or --nkey", subject)}
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return &exitError{code: ExitProblem, err: fmt.Errorf("no service answers %s: is the %s service running?", subject, serviceFor(subject))}
		}
		return &exitError{code: ExitProblem, err: fmt.Errorf("%s: %w", subject, err)}
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &serviceError{Code: code, Description: msg.Header.Get(micro.ErrorHeader), Body: msg.Data}
	}
	if out == nil {
		return nil
	}
	data, err := events.BodyOf(msg)
	if err == nil {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		return &exitError{code: ExitProblem, err: fmt.Errorf("%s: bad reply: %w", subject, err)}
	}
	return nil
}

func serviceFor(subject string) string {
	if len(subject) >= 6 && subject[:6] == "state." {
		return "state-store"
	}
	return "planner"
}

func quietLogger() *slogLogger { return newQuietLogger(os.Stderr) }

// errDenied: the server refused to let this identity publish the request.
var errDenied = errors.New("permissions violation")

// denials carries each connection's permission violations, as the server
// reports them (asynchronously), to the request waiting on them.
var denials sync.Map // *nats.Conn -> chan error

// watchDenials starts collecting nc's permission violations.
func watchDenials(nc *nats.Conn) {
	ch := make(chan error, 16)
	denials.Store(nc, ch)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case ch <- err:
			default:
			}
		}
	})
}

// requestOrDenied is nc.Request that returns errDenied as soon as the
// server refuses the publish, instead of waiting out the timeout.
func requestOrDenied(nc *nats.Conn, m *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	subject := m.Subject
	// The reply's subscription may be refused too (a viewer on an
	// operator's inbox prefix): the request then never gets its answer.
	inbox := cmp.Or(nc.Opts.InboxPrefix, strings.TrimSuffix(nats.InboxPrefix, "."))
	ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, nats.ErrTimeout)
	defer cancel()
	ctx, deny := context.WithCancelCause(ctx)
	defer deny(nil)
	if v, ok := denials.Load(nc); ok {
		go func() {
			for {
				select {
				case err := <-v.(chan error):
					if msg := err.Error(); strings.Contains(msg, `"`+subject+`"`) || strings.Contains(msg, `"`+inbox+`.`) {
						deny(errDenied)
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	if err := packRequest(m); err != nil {
		return nil, err
	}
	msg, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil && errors.Is(context.Cause(ctx), errDenied) {
		return nil, errDenied
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, nats.ErrTimeout
	}
	return msg, err
}

// packRequest compresses a large request body (a fleet's composition), as
// the services' replies are.
func packRequest(m *nats.Msg) error {
	data, packed, err := events.Pack(m.Data)
	if err != nil {
		return fmt.Errorf("%s: the request is %w", m.Subject, err)
	}
	if packed {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Data = data
		m.Header.Set(events.EncodingHeader, events.EncodingGzip)
	}
	return nil
}
