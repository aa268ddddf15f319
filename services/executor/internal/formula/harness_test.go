package formula

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
)

// host is a scripted host: each script's exit codes in turn (the last
// repeats; none: 0). A script named "block..." runs until it is killed,
// and says on start when it started.
type host struct {
	mu       sync.Mutex
	done     map[string]hostexec.Result // by attempt id, as the host keeps them
	exits    map[string][]int
	ran      []string    // scripts started, in order
	attempts []string    // their attempt ids
	start    chan string // a "block..." script started
	// orphans are attempts left running by an executor that died; settled
	// are the attempts a settle found, with what it answered.
	orphans map[string]bool
	settled []string
	// holders are the host locks' holder files, by lock: the attempt that
	// held each last, its mark and exit status, as an attempt that takes
	// the lock finds them (Waited: the next one waits for it). An attempt
	// is asked at its turn as hostexec asks it (Attempt.Turn), and holds
	// the lock after.
	holders map[string]hostexec.Holder
	turns   []hostexec.Holder // what Turn was asked with
	// release ends the scripts named "hold...": each says on start (as
	// "block..." does) when it started, and exits 0 once release is
	// closed.
	release chan struct{}
}

func (h *host) run(ctx context.Context, cmd hostexec.Attempt, settle bool) (hostexec.Result, error) {
	if settle {
		return h.settle(cmd.ID)
	}
	if cmd.BeforeStart != nil {
		if err := cmd.BeforeStart(); err != nil {
			return hostexec.Result{ExitCode: -1}, err
		}
	}
	h.mu.Lock()
	if res, ok := h.done[cmd.ID]; ok && cmd.ID != "" {
		h.mu.Unlock()
		return res, nil // re-attached: the recorded result, nothing runs
	}
	last, held := h.holders[cmd.Lock]
	if !held {
		last.ExitCode = -1
	}
	if cmd.Lock != "" && cmd.Turn != nil && (last.Waited || (cmd.Mark != "" && last.Mark == cmd.Mark && last.ExitCode == 0)) {
		h.turns = append(h.turns, last)
		h.mu.Unlock()
		if !cmd.Turn(last) {
			return hostexec.Result{ExitCode: -1}, hostexec.ErrDeclined // nothing started
		}
		h.mu.Lock()
	}
	h.ran = append(h.ran, cmd.Script)
	h.attempts = append(h.attempts, cmd.ID)
	code := 0
	if codes := h.exits[cmd.Script]; len(codes) > 0 {
		code = codes[0]
		if len(codes) > 1 {
			h.exits[cmd.Script] = codes[1:]
		}
	}
	h.mu.Unlock()
	if cmd.OnLine != nil {
		cmd.OnLine(hostexec.Stdout, "ran "+cmd.Script)
	}
	if strings.HasPrefix(cmd.Script, "hold") {
		h.start <- cmd.Script
		select {
		case <-h.release:
		case <-ctx.Done():
			return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: %w", hostexec.ErrCancelled, ctx.Err())
		}
	}
	if strings.HasPrefix(cmd.Script, "block") {
		h.start <- cmd.Script
		<-ctx.Done()
		cancelled := fmt.Errorf("%w: %w", hostexec.ErrCancelled, ctx.Err())
		if strings.HasPrefix(cmd.Script, "blockunkillable") {
			return hostexec.Result{ExitCode: -1}, errors.Join(cancelled, fmt.Errorf("%w: still running", hostexec.ErrKill))
		}
		return hostexec.Result{ExitCode: -1}, cancelled
	}
	res := hostexec.Result{ExitCode: code, Stdout: "ran " + cmd.Script + "\n"}
	h.mu.Lock()
	h.done[cmd.ID] = res
	if cmd.Lock != "" {
		h.holders[cmd.Lock] = hostexec.Holder{Attempt: cmd.ID, Mark: cmd.Mark, ExitCode: code}
	}
	h.mu.Unlock()
	return res, nil
}

// settle answers as hostexec's Settle: an orphan is killed (143), an
// attempt that ended gives its result, and any other never started.
func (h *host) settle(attempt string) (hostexec.Result, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.orphans[attempt] {
		delete(h.orphans, attempt)
		h.done[attempt] = hostexec.Result{ExitCode: 143}
		h.settled = append(h.settled, attempt+" killed")
		return hostexec.Result{ExitCode: 143}, fmt.Errorf("%w: %s killed", hostexec.ErrCancelled, attempt)
	}
	if res, ok := h.done[attempt]; ok {
		h.settled = append(h.settled, fmt.Sprintf("%s ended %d", attempt, res.ExitCode))
		return res, nil
	}
	h.settled = append(h.settled, attempt+" absent")
	return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: %s", hostexec.ErrNoAttempt, attempt)
}

func (h *host) scripts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ran...)
}

// runners gives one host's runner, or an error.
type runners struct {
	r   hostexec.AttemptRunner
	err error
}

func (r runners) Runner(transport.Target) (hostexec.AttemptRunner, error) { return r.r, r.err }

// scripted is a scripted host of these tests: one run for every command
// the executor gives it, a plain one (ID "") through Run, a durable one
// through RunAttempt, and a settle (settle true) through Settle.
type scripted interface {
	run(ctx context.Context, cmd hostexec.Attempt, settle bool) (hostexec.Result, error)
}

// fake is the runner of a scripted host.
type fake struct{ h scripted }

func (f fake) Run(ctx context.Context, cmd hostexec.Command) (hostexec.Result, error) {
	return f.h.run(ctx, hostexec.Attempt{Command: cmd}, false)
}

func (f fake) RunAttempt(ctx context.Context, a hostexec.Attempt) (hostexec.Result, error) {
	return f.h.run(ctx, a, false)
}

func (f fake) Settle(ctx context.Context, a hostexec.Attempt) (hostexec.Result, error) {
	return f.h.run(ctx, a, true)
}

// bus keeps events in a MemoryOutbox and output lines in a list.
type bus struct {
	out   *eventbustest.MemoryOutbox
	mu    sync.Mutex
	lines []string
	// wrap, when set, is the Emitter a formula run gets around out.
	wrap func(Emitter) Emitter
}

func (b *bus) Batch() Emitter {
	if b.wrap != nil {
		return b.wrap(b.out)
	}
	return b.out
}
func (b *bus) Fire(_ string, pl events.Payload) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, pl.(*events.LogLine).Line)
}

// harness is an Executor on in-memory ports and a scripted host.
type harness struct {
	x       *Executor
	host    *host
	records *eventbustest.MemoryBucket[Record]
	runs    *eventbustest.MemoryBucket[events.RunSnapshot]
	bus     *bus
}

func newHarness() *harness {
	h := &harness{host: &host{exits: map[string][]int{}, done: map[string]hostexec.Result{}, orphans: map[string]bool{}, holders: map[string]hostexec.Holder{},
		start: make(chan string, 8), release: make(chan struct{})}, records: &eventbustest.MemoryBucket[Record]{},
		runs: &eventbustest.MemoryBucket[events.RunSnapshot]{}, bus: &bus{out: &eventbustest.MemoryOutbox{}}}
	h.x = &Executor{Hosts: runners{r: fake{h.host}}, Records: h.records, Runs: h.runs, Bus: h.bus, Actor: "executor/test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// The planner writes a run's snapshot before it dispatches any of it.
	for _, id := range []string{"w1", "w2"} {
		h.runs.Set(id, events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning})
	}
	return h
}

// dispatch is formula f on h1 with the nodes given, in order.
func dispatch(op dag.Operation, gen int, nodes ...events.WorkNode) *events.Dispatch {
	d := &events.Dispatch{Ref: events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "f", Host: "h1", Operation: op, Generation: gen},
		Host: events.HostSpec{Transport: "local"}, OnFailure: dag.OnFailureStop, MaxParallel: 1}
	for _, n := range nodes {
		if n.Retry.MaxAttempts == 0 {
			n.Retry.MaxAttempts = 1
		}
		d.Nodes = append(d.Nodes, n)
		d.Order = append(d.Order, n.Name)
	}
	return d
}

func node(name, command string, attempts int, deps ...string) events.WorkNode {
	return events.WorkNode{Name: name, Command: command, DependsOn: deps, SpecHash: "h-" + name,
		Retry: dag.RetryPolicy{MaxAttempts: attempts, InitialInterval: 1, MaxInterval: 1, Multiplier: 1}}
}

func (h *harness) key(op dag.Operation, n string) string { return events.NodeKey("w1", op, "f", n) }

func (h *harness) record(op dag.Operation, n string) Record {
	r, _, err := h.records.Get(context.Background(), h.key(op, n))
	if err != nil {
		return Record{}
	}
	return r
}

// stored describes the events stored, one line each.
func (h *harness) stored() []string {
	var out []string
	for _, e := range h.bus.out.Stored() {
		switch p := e.Payload.(type) {
		case *events.FormulaEvent:
			s := "f " + string(p.Status)
			if p.Error != "" {
				s += ": " + p.Error
			}
			out = append(out, s)
		case *events.NodeEvent:
			s := fmt.Sprintf("%s %s %d", p.Node, p.Status, p.Attempt)
			if p.WillRetry {
				s += " retry"
			}
			if p.Check != "" {
				s += " " + string(p.Check)
			}
			if p.Unreachable {
				s += " unreachable"
			}
			if why := strings.TrimSpace(p.Reason + " " + p.Error); why != "" {
				s += ": " + why
			}
			out = append(out, s)
		}
	}
	return out
}
