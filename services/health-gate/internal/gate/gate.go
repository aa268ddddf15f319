// Package gate runs health gates: a formula's check, repeated on a
// schedule spread over the gate's whole timeout budget (see Schedule),
// every attempt and the final verdict published on decky.<host>.health.
package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strconv"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	"github.com/gantry-dev/gantry/pkg/outputs"
	"github.com/gantry-dev/gantry/pkg/secrets"
	"github.com/gantry-dev/gantry/pkg/tracing"
	"go.opentelemetry.io/otel/trace"
)

// Checker runs health gates.
type Checker struct {
	Hosts Runners
	Pub   Publisher
	// Secrets holds the values of the secrets gates name (none when nil).
	Secrets Secrets
	// Outputs holds what nodes hand on (gantry_outputs), for the checks
	// that read them (nil: none may).
	Outputs outputs.Store
	Log     *slog.Logger
	// Now and Sleep are the clock: time.Now and a timer when nil, a fake
	// clock in tests. Sleep returns early with ctx's error.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Tracer records gate spans (nil: none).
	Tracer *tracing.Tracer

	mu      sync.Mutex
	gates   map[*inProgress]struct{} // being checked
	cancels cancels
}

// Runners gives the runner of a host (transport.Hosts; a scripted host in
// tests).
type Runners interface {
	Runner(t transport.Target) (hostexec.Runner, error)
}

// Secrets finds the value of a secret a gate's env names, on this worker
// (secrets.Dir; secretstest.Map in tests).
type Secrets interface {
	Lookup(name string) (string, error)
}

// Publisher stores each check's event before the next check starts
// (eventbus.Publisher; eventbustest.MemoryOutbox in tests).
type Publisher interface {
	Publish(ctx context.Context, subject string, pl events.Payload, msgID string) error
}

// Handle is the consumer handler for decky.*.gate.
func (c *Checker) Handle(ctx context.Context, ev *consume.Event) error {
	var g events.GateRequest
	if err := events.DecodeData(ev.Envelope, &g); err != nil {
		return err
	}
	return c.Run(eventbus.ExtractTrace(ctx, ev.Header), &g)
}

// MaxLastWindow caps the time the last check has to answer before the
// budget ends (a tenth of the budget, at most this).
const MaxLastWindow = 5 * time.Second

// Schedule is when each of a gate's checks starts, as offsets from the
// gate's start: retries offsets (at least one). The first check runs at
// once. The last runs a tenth of the timeout before its end (at most
// MaxLastWindow before), so that a gate whose checks all fail gives its
// verdict near the end of its budget and never after it. The gaps in
// between grow by the same step each time, from half the mean gap to one
// and a half times it: a service coming up is caught early, and one that
// is slow is not checked needlessly often. A single check runs at once and
// may use the whole budget. Offsets are whole milliseconds for budgets of
// a second or more.
func Schedule(timeout time.Duration, retries int) []time.Duration {
	n := max(retries, 1)
	offsets := make([]time.Duration, n)
	if n == 1 || timeout <= 0 {
		return offsets
	}
	span := timeout - min(timeout/10, MaxLastWindow) // the last check's offset
	for k := 1; k < n; k++ {
		offsets[k] = spread(span, k, n)
		if timeout >= time.Second {
			offsets[k] = offsets[k].Truncate(time.Millisecond)
		}
	}
	return offsets
}

// spread is the offset of check k (0-based) of n over span: the gaps g_i
// (i = 0..n-2) grow linearly from m/2 to 3m/2, m = span/(n-1), so the sum
// of the first k is span·k·(k+n-3) / (2(n-1)(n-2)). Exact, in 128 bits.
func spread(span time.Duration, k, n int) time.Duration {
	if n == 2 {
		return span
	}
	hi, lo := bits.Mul64(uint64(span), uint64(k*(k+n-3)))
	q, _ := bits.Div64(hi, lo, uint64(2*(n-1)*(n-2)))
	return time.Duration(q)
}

// Run checks on the gate's schedule until a check passes, the checks are
// used up, or the budget is spent, publishing each check as an attempt and
// the last one as the verdict. Checks are read-only, so a redelivered gate
// is simply checked again. The span context in ctx (the gate request's,
// the formula's span) is the parent of the gate's span.
func (c *Checker) Run(ctx context.Context, g *events.GateRequest) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	cancelled, untrack := c.cancels.track(g.WorkflowID, g.Generation, stop)
	defer untrack()
	if cancelled {
		c.Log.Info("gate of a cancelled workflow: not checked", "workflow_id", g.WorkflowID, "host", g.Ref.Host, "formula", g.Formula)
		return nil
	}
	defer c.begin(g)()
	r := c.start(g)
	r.parent = trace.SpanContextFromContext(ctx)
	ctx = tracing.Context(ctx, r.parent, r.spanID())
	for attempt := 1; ; attempt++ {
		if err := r.waitTurn(ctx, attempt); err != nil {
			return r.stopped(ctx, err)
		}
		ev := r.check(ctx, attempt)
		if err := ctx.Err(); err != nil {
			return r.stopped(ctx, err) // shutting down is no verdict: the gate is delivered again
		}
		r.conclude(ev)
		if err := r.publish(ctx, ev); err != nil {
			return err
		}
		r.noteCheck(ev)
		if ev.Final {
			verdict(ev, r.c.now().Sub(r.begun))
			r.record(ctx, ev)
			return nil
		}
	}
}

// stopped is what a gate stopped by ctx ends with: nothing when its
// workflow was cancelled (no verdict: the run is over), else err (the
// worker stops: the gate is delivered again).
func (r *gateRun) stopped(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errWorkflowCancelled) {
		r.log.Info("gate stopped: its workflow was cancelled")
		return nil
	}
	return err
}

// gateRun is one run of a gate: its clock, schedule and budget.
type gateRun struct {
	c        *Checker
	g        *events.GateRequest
	log      *slog.Logger
	runner   hostexec.Runner
	script   string // the check, with the outputs it reads put in
	env      map[string]string
	secret   map[string]string
	rerr     error // the host cannot be reached, or a secret read: the first check fails final
	begun    time.Time
	deadline time.Time
	offsets  []time.Duration
	parent   trace.SpanContext // the formula's span (invalid: untraced)
	checks   []tracing.Event   // the checks made, for the gate's span
}

func (c *Checker) start(g *events.GateRequest) *gateRun {
	r := &gateRun{c: c, g: g, offsets: Schedule(g.Gate.Timeout.D(), g.Gate.Retries),
		log: c.Log.With("workflow_id", g.WorkflowID, "host", g.Ref.Host, "formula", g.Formula)}
	r.begun = c.now()
	r.deadline = r.begun.Add(g.Gate.Timeout.D())
	r.runner, r.rerr = c.Hosts.Runner(transport.TargetOf(g.Host))
	if r.rerr == nil {
		r.env, r.secret, r.rerr = secrets.Split(c.secrets(), g.Gate.Env)
		if r.rerr != nil {
			r.rerr = fmt.Errorf("nothing ran: its secrets could not be read: %w", r.rerr)
		}
	}
	r.script = g.Gate.Check
	if r.rerr == nil {
		r.rerr = r.fillOutputs()
	}
	if r.rerr == nil {
		r.rerr = r.fits()
	}
	return r
}

// outputsWait bounds reading the outputs a check reads.
const outputsWait = 30 * time.Second

// fillOutputs puts the outputs the check and its env read into them
// (see outputs.Filler): a secret one is masked in its output.
func (r *gateRun) fillOutputs() error {
	reads := dag.HasOutputs(r.script)
	for _, v := range r.env {
		reads = reads || dag.HasOutputs(v)
	}
	if !reads {
		return nil
	}
	if r.c.Outputs == nil {
		return errors.New("nothing ran: it reads outputs, and this health-gate keeps none")
	}
	ctx, cancel := context.WithTimeout(context.Background(), outputsWait)
	defer cancel()
	if r.secret == nil {
		r.secret = map[string]string{}
	}
	f := &outputs.Filler{Store: r.c.Outputs, Workflow: r.g.Workflow}
	script, err := f.Script(ctx, r.script)
	if err == nil {
		r.env, err = f.Env(ctx, r.env, r.secret)
	}
	if err != nil {
		return fmt.Errorf("nothing ran: %w", err)
	}
	f.Secrets(r.env, r.secret)
	r.script = script
	return nil
}

// fits refuses a check that, with its environment (its outputs in), is
// longer than a host's shell takes.
func (r *gateRun) fits() error {
	if why := dag.ScriptTooLarge(dag.ScriptWithEnvSize(r.script, r.env)); why != "" {
		return fmt.Errorf("nothing ran: the check with its environment (its outputs in) is %s", why)
	}
	return nil
}

// waitTurn sleeps until the attempt's offset, or not at all when an
// earlier check ran past it.
func (r *gateRun) waitTurn(ctx context.Context, attempt int) error {
	wait := r.begun.Add(r.offsets[attempt-1]).Sub(r.c.now())
	if wait <= 0 {
		return ctx.Err()
	}
	return r.c.sleep(ctx, wait)
}

// check runs the check once, bounded by what is left of the budget.
func (r *gateRun) check(ctx context.Context, attempt int) *events.HealthEvent {
	started := r.c.now()
	ev := &events.HealthEvent{Status: events.HealthFail, Run: events.Run{Attempt: attempt, StartedAt: utc(started)}}
	defer func() { ev.EndedAt = utc(r.c.now()) }()
	if r.rerr != nil {
		ev.Error = events.BoundError(r.rerr.Error())
		return ev
	}
	left := max(r.deadline.Sub(started), time.Millisecond) // 0 would be no limit
	res, err := r.runner.Run(ctx, hostexec.Command{Script: r.script, Env: r.env, Secrets: r.secret, Timeout: left, Become: r.g.Become, BecomeUser: r.g.BecomeUser})
	ev.OutputTail = events.BoundTail(res.Stdout+res.Stderr, events.MaxTailBytes)
	switch {
	case err != nil:
		ev.Error = events.BoundError(err.Error())
	case res.ExitCode == 0:
		ev.Status = events.HealthPass
		ev.ExitCode = &res.ExitCode
	default:
		ev.ExitCode = &res.ExitCode
		ev.Error = fmt.Sprintf("exit status %d", res.ExitCode)
	}
	return ev
}

// conclude marks the verdict: a pass, an unreachable host, the last check
// of the schedule, or a check that ended with the budget spent. A failing
// verdict says why.
func (r *gateRun) conclude(ev *events.HealthEvent) {
	checks := len(r.offsets)
	spent := !r.c.now().Before(r.deadline)
	ev.Final = ev.Status == events.HealthPass || r.rerr != nil || ev.Attempt >= checks || spent
	switch {
	case !ev.Final || ev.Status == events.HealthPass || r.rerr != nil:
	case ev.Attempt >= checks:
		ev.Error = fmt.Sprintf("failed %d of %d checks; last: %s", ev.Attempt, checks, ev.Error)
	default:
		ev.Error = fmt.Sprintf("gate budget of %s used up after %d checks; last: %s", r.g.Gate.Timeout.D(), ev.Attempt, ev.Error)
	}
}

// publish stores the check's event; a verdict is published as "final".
func (r *gateRun) publish(ctx context.Context, ev *events.HealthEvent) error {
	ev.Ref, ev.Retries = r.g.Ref, r.g.Gate.Retries
	what := "attempt"
	if ev.Final {
		what = "final"
	}
	g := r.g
	id := events.MsgID(g.WorkflowID, strconv.Itoa(g.Generation), g.Formula, "gate", what, strconv.Itoa(ev.Attempt))
	if err := r.c.Pub.Publish(ctx, events.HostHealth(g.Ref.Host), ev, id); err != nil {
		return err
	}
	r.log.Info("health check", "attempt", ev.Attempt, "status", ev.Status, "final", ev.Final)
	return nil
}

func (c *Checker) secrets() Secrets {
	if c.Secrets == nil {
		return &secrets.Dir{} // no secrets directory: each lookup says so
	}
	return c.Secrets
}

func (c *Checker) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Checker) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return nil
}

func utc(t time.Time) *time.Time {
	t = t.UTC()
	return &t
}
