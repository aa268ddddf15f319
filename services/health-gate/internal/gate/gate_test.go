package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
)

// clock is a fake clock: Sleep moves it on at once and records how long
// was asked for.
type clock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newClock() *clock { return &clock{now: epoch} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

// since is the fake time since the epoch.
func (c *clock) since() time.Duration { return c.Now().Sub(epoch) }

// probe answers checks with the exit codes given, in turn (the last
// repeats). On a fake clock, each check takes took[i] (the last repeats;
// none: no time), and one that would outlast its timeout is cut off there
// with hostexec's timeout error.
type probe struct {
	mu       sync.Mutex
	exits    []int
	took     []time.Duration
	clock    *clock
	calls    int
	starts   []time.Duration // when each check started, since the epoch
	timeouts []time.Duration // the bound each check was given
	env      []map[string]string
	secrets  []map[string]string
	become   []string // whom each check became ("" none, else the user, "root" for sudo's default)
}

func (p *probe) Run(_ context.Context, cmd hostexec.Command) (hostexec.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	p.timeouts = append(p.timeouts, cmd.Timeout)
	p.env, p.secrets = append(p.env, cmd.Env), append(p.secrets, cmd.Secrets)
	as := ""
	if cmd.Become {
		as = cmd.BecomeUser
		if as == "" {
			as = "root"
		}
	}
	p.become = append(p.become, as)
	if p.clock != nil {
		p.starts = append(p.starts, p.clock.since())
		if len(p.took) > 0 {
			took := p.took[min(p.calls, len(p.took))-1]
			p.clock.mu.Lock()
			p.clock.now = p.clock.now.Add(min(took, cmd.Timeout))
			p.clock.mu.Unlock()
			if took > cmd.Timeout {
				return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w after %s", hostexec.ErrTimeout, cmd.Timeout)
			}
		}
	}
	code := p.exits[min(p.calls, len(p.exits))-1]
	return hostexec.Result{ExitCode: code, Stdout: fmt.Sprintf("check %d\n", p.calls)}, nil
}

type runners struct {
	r   hostexec.Runner
	err error
}

func (r runners) Runner(transport.Target) (hostexec.Runner, error) { return r.r, r.err }

func request(timeout time.Duration, retries int) *events.GateRequest {
	return &events.GateRequest{Ref: events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "f", Host: "h1", Operation: dag.OpCreate, Generation: 1},
		Host: events.HostSpec{Transport: "local"}, Gate: dag.HealthGate{Check: "probe", Timeout: dag.Duration(timeout), Retries: retries}}
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// fake is a checker of the probe on a fake clock.
func fake(p *probe, out *eventbustest.MemoryOutbox) (*Checker, *clock) {
	clk := newClock()
	p.clock = clk
	return &Checker{Hosts: runners{r: p}, Pub: out, Log: discard, Now: clk.Now, Sleep: clk.Sleep}, clk
}

func describe(out *eventbustest.MemoryOutbox) []string {
	var s []string
	for _, e := range out.Stored() {
		h := e.Payload.(*events.HealthEvent)
		line := fmt.Sprintf("%d %s", h.Attempt, h.Status)
		if h.Final {
			line += " final"
		}
		if h.Error != "" {
			line += ": " + h.Error
		}
		s = append(s, line)
	}
	return s
}

// startedAt is when each published check started, since the epoch.
func startedAt(out *eventbustest.MemoryOutbox) []time.Duration {
	var s []time.Duration
	for _, e := range out.Stored() {
		s = append(s, e.Payload.(*events.HealthEvent).StartedAt.Sub(epoch))
	}
	return s
}

func ms(v ...float64) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x * float64(time.Millisecond))
	}
	return d
}

func same[T comparable](t *testing.T, what string, got, want []T) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s\n  %v\nwant\n  %v", what, got, want)
	}
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	cases := []struct {
		timeout time.Duration
		retries int
		want    []time.Duration
	}{
		{10 * time.Second, 1, ms(0)}, // one check, at once, with the whole budget to answer
		{10 * time.Second, 2, ms(0, 9000)},
		{2 * time.Second, 3, ms(0, 450, 1800)},
		{5 * time.Second, 3, ms(0, 1125, 4500)},
		{20 * time.Second, 3, ms(0, 4500, 18000)},
		{20 * time.Second, 5, ms(0, 2250, 6000, 11250, 18000)},
		// gaps 9.7 s growing to 29.2 s, 19.4 s on average; the last check 5 s before the end
		{180 * time.Second, 10, ms(0, 9722, 21875, 36458, 53472, 72916, 94791, 119097, 145833, 175000)},
		{10 * time.Minute, 5, ms(0, 74375, 198333, 371875, 595000)},
		{500 * time.Millisecond, 3, ms(0, 112.5, 450)}, // under a second: not rounded
		{time.Second, 0, ms(0)}, // not a valid gate: one check
	}
	for _, c := range cases {
		same(t, fmt.Sprintf("Schedule(%s, %d)", c.timeout, c.retries), Schedule(c.timeout, c.retries), c.want)
	}
}

// Every schedule starts at once, ends in the last tenth of the budget (at
// most 5 s before its end), and its gaps never shrink.
func TestScheduleShape(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{time.Millisecond, 90 * time.Millisecond, time.Second, 7 * time.Second, 61 * time.Second, 180 * time.Second, time.Hour, 1000 * time.Hour} {
		for retries := 1; retries <= dag.MaxRetryAttempts; retries++ {
			s := Schedule(timeout, retries)
			if len(s) != retries || s[0] != 0 {
				t.Fatalf("Schedule(%s, %d) = %v", timeout, retries, s)
			}
			if retries == 1 {
				continue
			}
			last := s[len(s)-1]
			if last < timeout*9/10-time.Millisecond || last > timeout-min(timeout/10, MaxLastWindow) {
				t.Fatalf("Schedule(%s, %d): last check at %s", timeout, retries, last)
			}
			for i := 2; i < len(s); i++ {
				if g, prev := s[i]-s[i-1], s[i-1]-s[max(i-2, 0)]; g <= 0 || g < prev-time.Millisecond {
					t.Fatalf("Schedule(%s, %d): gap %s after %s: %v", timeout, retries, g, prev, s)
				}
			}
		}
	}
}

func TestGateVerdicts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		exits   []int
		err     error
		timeout time.Duration
		retries int
		want    []string
	}{
		{name: "passes at once", exits: []int{0}, timeout: time.Second, retries: 3, want: []string{"1 pass final"}},
		{name: "passes on the third check", exits: []int{1, 1, 0}, timeout: time.Second, retries: 5,
			want: []string{"1 fail: exit status 1", "2 fail: exit status 1", "3 pass final"}},
		{name: "fails when its retries are used up", exits: []int{3}, timeout: time.Second, retries: 2,
			want: []string{"1 fail: exit status 3", "2 fail final: failed 2 of 2 checks; last: exit status 3"}},
		{name: "an unreachable host fails at once", err: errors.New("no key"), timeout: time.Second, retries: 3,
			want: []string{"1 fail final: no key"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out := &eventbustest.MemoryOutbox{}
			ck, _ := fake(&probe{exits: c.exits}, out)
			ck.Hosts = runners{r: ck.Hosts.(runners).r, err: c.err}
			if err := ck.Run(context.Background(), request(c.timeout, c.retries)); err != nil {
				t.Fatal(err)
			}
			same(t, "events", describe(out), c.want)
		})
	}
}

// A check that, with its environment, is longer than a host's shell takes
// as one argument fails the gate at once, saying so, and is never run: the
// host would refuse it ("argument list too long"), which read as a check
// that failed.
func TestGateCheckTooLargeFailsAtOnce(t *testing.T) {
	t.Parallel()
	out := &eventbustest.MemoryOutbox{}
	p := &probe{exits: []int{0}}
	ck, _ := fake(p, out)
	req := request(time.Second, 3)
	req.Gate.Env = map[string]dag.EnvValue{"BIG": dag.Text(strings.Repeat("x", dag.MaxScript))}
	if err := ck.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := describe(out)
	if len(got) != 1 || !strings.HasPrefix(got[0], "1 fail final: nothing ran: the check with its environment (its outputs in) is ") {
		t.Errorf("events %q", got)
	}
	if p.calls != 0 {
		t.Errorf("the check ran %d times", p.calls)
	}
}

// A gate whose checks all fail checks on its schedule, each check bounded
// by what is left of the budget, and gives its verdict near the end of it.
func TestGateChecksOnSchedule(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		timeout time.Duration
		retries int
		took    time.Duration
	}{{20 * time.Second, 3, 100 * time.Millisecond}, {180 * time.Second, 10, 0}, {2 * time.Second, 3, 0}, {10 * time.Second, 1, time.Second}} {
		t.Run(fmt.Sprintf("%s/%d", c.timeout, c.retries), func(t *testing.T) {
			t.Parallel()
			out := &eventbustest.MemoryOutbox{}
			p := &probe{exits: []int{1}, took: []time.Duration{c.took}}
			ck, clk := fake(p, out)
			if err := ck.Run(context.Background(), request(c.timeout, c.retries)); err != nil {
				t.Fatal(err)
			}
			sched := Schedule(c.timeout, c.retries)
			same(t, "checks started at", p.starts, sched)
			same(t, "published started_at", startedAt(out), sched)
			var bounds, sleeps []time.Duration
			for i, o := range sched {
				bounds = append(bounds, c.timeout-o)
				if i > 0 {
					sleeps = append(sleeps, o-sched[i-1]-c.took)
				}
			}
			same(t, "check bounds", p.timeouts, bounds)
			same(t, "sleeps", clk.slept, sleeps)
			verdict := clk.since()
			if want := sched[len(sched)-1] + c.took; verdict != want {
				t.Errorf("verdict at %s, want %s", verdict, want)
			}
			if c.retries > 1 && (verdict < c.timeout*9/10 || verdict > c.timeout) {
				t.Errorf("verdict at %s of a %s budget", verdict, c.timeout)
			}
			got := describe(out)
			if want := fmt.Sprintf("%d fail final: failed %d of %d checks; last: exit status 1", c.retries, c.retries, c.retries); len(got) != c.retries || got[len(got)-1] != want {
				t.Errorf("events %q, want the last %q", got, want)
			}
		})
	}
}

// A pass ends the gate at once: no more checks, no more waiting.
func TestGatePassEndsAtOnce(t *testing.T) {
	t.Parallel()
	out := &eventbustest.MemoryOutbox{}
	p := &probe{exits: []int{1, 1, 0, 1}}
	ck, clk := fake(p, out)
	if err := ck.Run(context.Background(), request(180*time.Second, 10)); err != nil {
		t.Fatal(err)
	}
	same(t, "events", describe(out), []string{"1 fail: exit status 1", "2 fail: exit status 1", "3 pass final"})
	same(t, "checks started at", p.starts, ms(0, 9722, 21875))
	if v := clk.since(); v != 21875*time.Millisecond {
		t.Errorf("verdict at %s", v)
	}
}

// A check that runs past the next one's turn delays it (the next starts
// as it ends); one cut off at the end of the budget is the verdict, at the
// end of the budget.
func TestGateSlowChecks(t *testing.T) {
	t.Parallel()
	t.Run("late", func(t *testing.T) {
		t.Parallel()
		out := &eventbustest.MemoryOutbox{}
		p := &probe{exits: []int{1}, took: []time.Duration{6 * time.Second, 0}}
		ck, clk := fake(p, out)
		if err := ck.Run(context.Background(), request(20*time.Second, 3)); err != nil {
			t.Fatal(err)
		}
		same(t, "checks started at", p.starts, ms(0, 6000, 18000))
		same(t, "sleeps", clk.slept, ms(12000))
	})
	t.Run("cut off", func(t *testing.T) {
		t.Parallel()
		out := &eventbustest.MemoryOutbox{}
		p := &probe{exits: []int{1}, took: []time.Duration{0, time.Hour}}
		ck, clk := fake(p, out)
		if err := ck.Run(context.Background(), request(20*time.Second, 3)); err != nil {
			t.Fatal(err)
		}
		same(t, "check bounds", p.timeouts, ms(20000, 15500))
		same(t, "events", describe(out), []string{"1 fail: exit status 1",
			"2 fail final: gate budget of 20s used up after 2 checks; last: timed out after 15.5s"})
		if v := clk.since(); v != 20*time.Second {
			t.Errorf("verdict at %s, want at the end of the budget", v)
		}
	})
}

// A gate cut short by shutdown publishes no verdict: it is delivered again.
func TestGateCancelledIsNoVerdict(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	out := &eventbustest.MemoryOutbox{}
	ck, clk := fake(&probe{exits: []int{1}}, out)
	ck.Sleep = func(ctx context.Context, d time.Duration) error {
		cancel()
		return clk.Sleep(ctx, d)
	}
	if err := ck.Run(ctx, request(20*time.Second, 3)); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	same(t, "events", describe(out), []string{"1 fail: exit status 1"})
}

// A verdict that cannot be stored is not lost: the request comes back.
func TestGateEventNotStoredIsRedelivered(t *testing.T) {
	t.Parallel()
	down := errors.New("stream away")
	out := &eventbustest.MemoryOutbox{Fail: func(eventbustest.Emitted) error { return down }}
	ck, _ := fake(&probe{exits: []int{0}}, out)
	if err := ck.Run(context.Background(), request(time.Second, 1)); !errors.Is(err, down) {
		t.Fatalf("err %v", err)
	}
}

// A gate whose every check fails gives its verdict near the end of its
// budget: not before nine tenths of it, and not after it (give or take a
// loaded machine). On the real clock.
func TestGateFailingVerdictComesAtTheEndOfItsBudget(t *testing.T) {
	t.Parallel()
	const budget = 500 * time.Millisecond
	out := &eventbustest.MemoryOutbox{}
	ck := &Checker{Hosts: runners{r: &probe{exits: []int{1}}}, Pub: out, Log: discard}
	start := time.Now()
	if err := ck.Run(context.Background(), request(budget, 3)); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < budget*9/10 || took > budget+250*time.Millisecond {
		t.Errorf("verdict after %s of a %s budget, want between %s and %s", took.Round(time.Millisecond), budget, budget*9/10, budget)
	}
	same(t, "events", describe(out), []string{"1 fail: exit status 1", "2 fail: exit status 1", "3 fail final: failed 3 of 3 checks; last: exit status 1"})
}
