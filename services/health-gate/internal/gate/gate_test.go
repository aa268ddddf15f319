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
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// probe answers checks with the exit codes given, in turn (the last
// repeats).
type probe struct {
	mu    sync.Mutex
	exits []int
	calls int
}

func (p *probe) Run(context.Context, hostexec.Command) (hostexec.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	code := p.exits[min(p.calls, len(p.exits))-1]
	return hostexec.Result{ExitCode: code, Stdout: fmt.Sprintf("check %d\n", p.calls)}, nil
}

type runners struct {
	r   hostexec.Runner
	err error
}

func (r runners) Runner(string, string, string) (hostexec.Runner, error) { return r.r, r.err }

func request(timeout time.Duration, retries int) *events.GateRequest {
	return &events.GateRequest{Ref: events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "f", Host: "h1", Operation: dag.OpCreate, Generation: 1},
		Host: events.HostSpec{Transport: "local"}, Gate: dag.HealthGate{Check: "probe", Timeout: dag.Duration(timeout), Retries: retries}}
}

func describe(out *events.MemoryOutbox) []string {
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
			out := &events.MemoryOutbox{}
			ck := &Checker{Hosts: runners{r: &probe{exits: c.exits}, err: c.err}, Pub: out, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if err := ck.Run(context.Background(), request(c.timeout, c.retries)); err != nil {
				t.Fatal(err)
			}
			if got := describe(out); !slices.Equal(got, c.want) {
				t.Fatalf("events\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

// A verdict that cannot be stored is not lost: the request comes back.
func TestGateEventNotStoredIsRedelivered(t *testing.T) {
	t.Parallel()
	down := errors.New("stream away")
	out := &events.MemoryOutbox{Fail: func(events.Emitted) error { return down }}
	ck := &Checker{Hosts: runners{r: &probe{exits: []int{0}}}, Pub: out, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := ck.Run(context.Background(), request(time.Second, 1)); !errors.Is(err, down) {
		t.Fatalf("err %v", err)
	}
}
