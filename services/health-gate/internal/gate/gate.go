// Package gate runs health gates: a formula's check, retried with
// exponential backoff spread over the gate's timeout budget, every attempt
// and the final verdict published on decky.<host>.health.
package gate

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// Checker runs health gates.
type Checker struct {
	Hosts Runners
	Pub   Publisher
	Log   *slog.Logger
}

// Runners gives the runner of a host (hostexec.Hosts; a scripted host in
// tests).
type Runners interface {
	Runner(transport, address, user string) (hostexec.Runner, error)
}

// Publisher stores each check's event before the next check starts
// (events.Publisher; events.MemoryOutbox in tests).
type Publisher interface {
	Publish(ctx context.Context, subject string, pl events.Payload, msgID string) error
}

// Handle is the consumer handler for decky.*.gate.
func (c *Checker) Handle(ctx context.Context, ev *consume.Event) error {
	var g events.GateRequest
	if err := events.DecodeData(ev.Envelope, &g); err != nil {
		return err
	}
	return c.Run(ctx, &g)
}

// Schedule is the backoff between checks: the budget divided by the
// retries is the mean gap, starting at half of it and growing by 1.5, as
// the checks of a service that is coming up should be.
func Schedule(timeout time.Duration, retries int) *backoff.ExponentialBackOff {
	mean := timeout / time.Duration(max(retries, 1))
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = max(mean/2, 10*time.Millisecond)
	b.Multiplier = 1.5
	b.RandomizationFactor = 0.2
	b.MaxInterval = max(2*mean, b.InitialInterval)
	b.MaxElapsedTime = timeout
	b.Reset()
	return b
}

// Run checks until the gate passes, its retries are used up, or its budget
// is spent, and publishes the verdict. Checks are read-only, so a
// redelivered gate is simply checked again.
func (c *Checker) Run(ctx context.Context, g *events.GateRequest) error {
	log := c.Log.With("workflow_id", g.WorkflowID, "host", g.Ref.Host, "formula", g.Formula)
	budget := g.Gate.Timeout.D()
	deadline := time.Now().Add(budget)
	sched := Schedule(budget, g.Gate.Retries)
	runner, rerr := c.Hosts.Runner(string(g.Host.Transport), g.Host.Address, g.Host.User)
	publish := func(ev *events.HealthEvent) error {
		ev.Ref, ev.Retries = g.Ref, g.Gate.Retries
		what := "attempt"
		if ev.Final {
			what = "final"
		}
		id := events.MsgID(g.WorkflowID, strconv.Itoa(g.Generation), g.Formula, "gate", what, strconv.Itoa(ev.Attempt))
		return c.Pub.Publish(ctx, events.HostHealth(g.Ref.Host), ev, id)
	}
	for attempt := 1; ; attempt++ {
		started := time.Now().UTC()
		ev := &events.HealthEvent{Status: events.HealthFail, Run: events.Run{Attempt: attempt, StartedAt: &started}}
		remaining := time.Until(deadline)
		if rerr != nil {
			ev.Error = events.BoundError(rerr.Error())
		} else {
			res, err := runner.Run(ctx, hostexec.Command{Script: g.Gate.Check, Timeout: max(remaining, time.Second)})
			if err == nil {
				code := res.ExitCode
				ev.ExitCode = &code
				if code == 0 {
					ev.Status = events.HealthPass
				} else {
					ev.Error = fmt.Sprintf("exit status %d", code)
				}
			} else {
				ev.Error = events.BoundError(err.Error())
			}
			ev.OutputTail = events.BoundTail(res.Stdout+res.Stderr, events.MaxTailBytes)
		}
		ended := time.Now().UTC()
		ev.EndedAt = &ended
		next := sched.NextBackOff()
		last := ev.Status == events.HealthPass || attempt >= g.Gate.Retries || rerr != nil ||
			next == backoff.Stop || time.Until(deadline) <= 0
		if last && ev.Status == events.HealthFail {
			switch {
			case rerr != nil:
			case attempt >= g.Gate.Retries:
				ev.Error = fmt.Sprintf("failed %d of %d checks; last: %s", attempt, g.Gate.Retries, ev.Error)
			default:
				ev.Error = fmt.Sprintf("gate budget of %s used up after %d checks; last: %s", budget, attempt, ev.Error)
			}
		}
		ev.Final = last
		if err := publish(ev); err != nil {
			return err
		}
		log.Info("health check", "attempt", attempt, "status", ev.Status, "final", last)
		if last {
			return nil
		}
		wait := min(next, time.Until(deadline))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(max(wait, 0)):
		}
	}
}
