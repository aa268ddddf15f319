package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/nats-io/nats.go"
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
	cmd.Flags().StringVarP(&c.opts.URL, "server", "s", "", "NATS URL (default $NATS_URL, else the context's, else "+natsconn.DefaultURL+")")
	fs := flag.NewFlagSet("conn", flag.ContinueOnError)
	c.opts.RegisterCredentials(fs)
	cmd.Flags().AddGoFlagSet(fs)
}

// connect connects with the flags, the nats CLI's environment and
// context; with no credentials at all, to a `gantry dev` on this machine
// as its operator.
func (c *connFlags) connect() (*client.Client, error) { return c.dial("") }

// connectOperator is connect for what only an operator may do (submit,
// control, rebuild): its replies come to the operator's own inbox prefix,
// which a viewer may not subscribe to, so no viewer reads a plan's
// commands. A prefix the flags' context names is kept.
func (c *connFlags) connectOperator() (*client.Client, error) {
	return c.dial(events.Operator.InboxPrefix())
}

// dial connects; inbox is the reply prefix when the context names none
// ("": the nats default).
func (c *connFlags) dial(inbox string) (*client.Client, error) {
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
	if err != nil {
		code := ExitProblem
		if errors.Is(err, natsconn.ErrBadOptions) {
			code = ExitUsage
		}
		return nil, &exitError{code: code, err: fmt.Errorf("%w (is `gantry dev` running? set --server or NATS_URL, and --creds or --nkey)", err)}
	}
	return client.New(nc, c.timeout), nil
}

// busErr is the CLI's error for a request the client could not make: one
// the server refused this identity, one no service answers, one with no
// usable reply (ExitProblem). A service's error reply
// (*client.ServiceError) is returned as it is, for the command to word.
func busErr(err error) error {
	var re *client.RequestError
	switch {
	case !errors.As(err, &re):
		return err
	case errors.Is(err, client.ErrRepliesDenied):
		return &exitError{code: ExitProblem, err: errors.New("this command is for operators: not allowed for this identity (the NATS server refused it the replies, which come to the operator's inbox); connect as an operator with --creds or --nkey")}
	case errors.Is(err, client.ErrDenied):
		return &exitError{code: ExitProblem, err: fmt.Errorf("%s: not allowed for this identity (the NATS server refused the request); connect as an operator with --creds or --nkey", re.Subject)}
	case errors.Is(err, nats.ErrNoResponders):
		return &exitError{code: ExitProblem, err: fmt.Errorf("no service answers %s: is the %s service running?", re.Subject, serviceFor(re.Subject))}
	}
	return &exitError{code: ExitProblem, err: re}
}

func serviceFor(subject string) string {
	if len(subject) >= 6 && subject[:6] == "state." {
		return "state-store"
	}
	return "planner"
}

func quietLogger() *slogLogger { return newQuietLogger(os.Stderr) }

// stateErr turns a state-store error reply into a CLI error.
func stateErr(err error) error {
	var se *client.ServiceError
	if errors.As(err, &se) {
		if se.Code == "404" {
			return failed("%s", se.Description)
		}
		return &exitError{code: ExitProblem, err: fmt.Errorf("state-store: %s", se.Description)}
	}
	return busErr(err)
}

// showState asks the state-store with read and prints its answer: as -o
// json or yaml asks (output), else as table prints it.
func showState[T any](cmd *cobra.Command, cf *connFlags, output string, read func(context.Context, *client.Client) (T, error), table func(io.Writer, T) error) error {
	cl, err := cf.connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	v, err := read(cmd.Context(), cl)
	if err != nil {
		return stateErr(err)
	}
	if structured(output) {
		return printAs(cmd.OutOrStdout(), output, v)
	}
	return table(cmd.OutOrStdout(), v)
}
