package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/spf13/cobra"
)

// connFlags are the flags of every command that talks to NATS.
type connFlags struct {
	server  string
	timeout time.Duration
}

func (c *connFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&c.server, "server", "s", "", "NATS URL (default $NATS_URL, else "+natsconn.DefaultURL+")")
	cmd.Flags().DurationVar(&c.timeout, "timeout", 30*time.Second, "how long to wait for a reply")
}

func (c *connFlags) connect() (*nats.Conn, error) {
	nc, err := natsconn.Connect(natsconn.URL(c.server), "gantry-cli", quietLogger(), false)
	if err != nil {
		return nil, &exitError{code: ExitProblem, err: fmt.Errorf("%w (is `gantry dev` running? set --server or NATS_URL)", err)}
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
	msg, err := nc.Request(subject, body, timeout)
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
	if err := json.Unmarshal(msg.Data, out); err != nil {
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
