package sshexec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// maxSessionsHost starts one sshd whose MaxSessions is max.
func maxSessionsHost(t *testing.T, max int) *sshtest.Fleet {
	t.Helper()
	return sshtest.Start(t, 1, sshtest.Options{HostConfig: map[int][]string{0: {fmt.Sprintf("MaxSessions %d", max)}}})
}

// sshd allows fewer sessions on a connection than gantry's
// --ssh-max-sessions (8): MaxSessions 1 or 2, and 8 commands at once on
// one connection, durable (in host agents), plain, or both. Every command
// runs to its end: the sessions sshd refuses wait for a session of the
// connection to end (its learned limit), and none hangs.
func TestSessionsBeyondSSHDMaxSessions(t *testing.T) {
	t.Parallel()
	for _, max := range []int{1, 2} {
		for _, kind := range []string{"durable", "plain", "mixed"} {
			t.Run(fmt.Sprintf("MaxSessions%d/%s", max, kind), func(t *testing.T) {
				t.Parallel()
				f := maxSessionsHost(t, max)
				r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
				dir := t.TempDir()
				ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
				defer cancel()
				type result struct {
					i   int
					res hostexec.Result
					err error
				}
				results := make(chan result, 8)
				for i := range 8 {
					go func() {
						cmd := hostexec.Attempt{Command: hostexec.Command{Script: fmt.Sprintf("sleep 0.3; echo done-%d", i)}}
						if kind == "durable" || kind == "mixed" && i%2 == 0 {
							cmd.ID, cmd.Env = fmt.Sprintf("w.1.f.n%d.1", i), map[string]string{"GANTRY_ATTEMPTS": dir}
						}
						res, err := runAs(ctx, r, cmd)
						results <- result{i, res, err}
					}()
				}
				for range 8 {
					select {
					case got := <-results:
						if got.err != nil || got.res.ExitCode != 0 || got.res.Stdout != fmt.Sprintf("done-%d\n", got.i) {
							t.Errorf("command %d: %+v %v", got.i, got.res, got.err)
						}
					case <-time.After(50 * time.Second):
						t.Fatal("a command still runs after 50s")
					}
				}
			})
		}
	}
}

// Idle host agents give their sessions back when sshd refuses a new one:
// with MaxSessions 2, two agents left idle do not keep a plain command
// (which takes a free slot of gantry's 8, not an agent's) out.
func TestRefusedSessionClosesIdleAgents(t *testing.T) {
	t.Parallel()
	f := maxSessionsHost(t, 2)
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := r.RunAttempt(ctx, hostexec.Attempt{ID: fmt.Sprintf("w.1.f.n%d.1", i), Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, Script: "echo durable"}})
			if err != nil || res.Stdout != "durable\n" {
				t.Errorf("durable %d: %+v %v", i, res, err)
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	res, err := r.Run(ctx, hostexec.Command{Script: "echo plain"})
	if err != nil || res.Stdout != "plain\n" {
		t.Fatalf("plain command beside two idle agents, sshd allowing 2 sessions: %+v %v after %s", res, err, time.Since(start).Round(time.Millisecond))
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the plain command took %s", took)
	}
	res, err = r.RunAttempt(ctx, hostexec.Attempt{ID: "w.1.f.n9.1", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, Script: "echo again"}})
	if err != nil || res.Stdout != "again\n" {
		t.Fatalf("durable after the plain one: %+v %v", res, err)
	}
}

// A command is not announced (BeforeStart, which records the attempt and
// publishes "running") while it waits for a session sshd refuses: with
// MaxSessions 1 and a command running, the next one's BeforeStart comes
// once the first one ended and its own session opened.
func TestBeforeStartWaitsForTheSession(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"plain", "durable"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := maxSessionsHost(t, 1)
			r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			firstStarted := make(chan struct{})
			type ended struct {
				res hostexec.Result
				err error
			}
			first := make(chan ended, 1)
			go func() {
				res, err := r.Run(ctx, hostexec.Command{Script: "sleep 1.5; echo first", BeforeStart: func() error { close(firstStarted); return nil }})
				first <- ended{res, err}
			}()
			<-firstStarted
			time.Sleep(200 * time.Millisecond) // it runs, in the one session sshd allows
			var mu sync.Mutex
			var announced time.Time
			cmd := hostexec.Attempt{Command: hostexec.Command{Script: "echo second", BeforeStart: func() error { mu.Lock(); announced = time.Now(); mu.Unlock(); return nil }}}
			if kind == "durable" {
				cmd.ID, cmd.Env = "w.1.f.n1.1", map[string]string{"GANTRY_ATTEMPTS": dir}
			}
			res, err := runAs(ctx, r, cmd)
			if err != nil || res.Stdout != "second\n" {
				t.Fatalf("second: %+v %v", res, err)
			}
			e := <-first
			if e.err != nil || e.res.Stdout != "first\n" {
				t.Fatalf("first: %+v %v", e.res, e.err)
			}
			mu.Lock()
			defer mu.Unlock()
			if early := e.res.Ended.Sub(announced); early > 300*time.Millisecond {
				t.Fatalf("the second command was announced %s before the first one ended and freed the session", early.Round(time.Millisecond))
			}
		})
	}
}

// A host whose sshd refuses every session (MaxSessions 0) fails the
// command after --ssh-session-wait (30 s by default) with an error that
// names MaxSessions, instead of waiting for ever; nothing was announced.
func TestRefusedSessionsFailNamingMaxSessions(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"plain", "durable"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := maxSessionsHost(t, 0)
			r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			announced := false
			cmd := hostexec.Attempt{Command: hostexec.Command{Script: "echo never", BeforeStart: func() error { announced = true; return nil }}}
			if kind == "durable" {
				cmd.ID, cmd.Env = "w.1.f.n1.1", map[string]string{"GANTRY_ATTEMPTS": t.TempDir()}
			}
			start := time.Now()
			_, err := runAs(ctx, r, cmd)
			took := time.Since(start)
			if err == nil || !errors.Is(err, hostexec.ErrSession) || !strings.Contains(err.Error(), "MaxSessions") || !strings.Contains(err.Error(), "--ssh-max-sessions") {
				t.Fatalf("after %s: %v, want a session error naming MaxSessions and --ssh-max-sessions", took.Round(time.Millisecond), err)
			}
			if took < 30*time.Second || took > 35*time.Second {
				t.Fatalf("failed after %s, want the 30s of --ssh-session-wait", took.Round(time.Millisecond))
			}
			if announced {
				t.Fatal("BeforeStart was called though nothing started")
			}
			t.Log(err)
		})
	}
}

// poolFor is a pool for the fleet with cfg's session settings.
func poolFor(t *testing.T, f *sshtest.Fleet, cfg SSHConfig) *Pool {
	t.Helper()
	cfg.KeyFile, cfg.KnownHosts, cfg.DefaultUser = f.KeyFile, f.KnownHosts, f.User
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// runAtOnce runs n plain commands at once and fails the test unless each
// prints its line.
func runAtOnce(t *testing.T, r hostexec.Runner, n int, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.Run(ctx, hostexec.Command{Script: script + fmt.Sprintf("; echo %d", i)})
			if err != nil || res.Stdout != fmt.Sprintf("%d\n", i) {
				t.Errorf("command %d: %+v %v", i, res, err)
			}
		}()
	}
	wg.Wait()
}

// The connection learns the sessions sshd allows (MaxSessions 2 under
// gantry's 8) from its refusals, and keeps to them: a second burst of 8
// commands waits for the connection's sessions instead of asking sshd
// again and again (a few refusals at most, each a session asked for the
// moment another one closed, before sshd freed its slot), until the
// connection is closed for being idle. Not parallel: it counts the
// refusals of the whole process.
func TestSessionLimitLearned(t *testing.T) {
	f := maxSessionsHost(t, 2)
	p := poolFor(t, f, SSHConfig{})
	r := p.Runner(f.Hosts[0].Addr, "")
	runAtOnce(t, r, 8, "sleep 0.3")
	c := p.conns[f.User+"@"+f.Hosts[0].Addr]
	c.lim.Lock()
	limit, reserved := c.limit, c.reserved
	c.lim.Unlock()
	if limit != 2 || reserved != 6 {
		t.Fatalf("limit %d (%d slots reserved), want sshd's 2 (6 of 8)", limit, reserved)
	}
	before := testutilCount(sshSessionsRefused)
	runAtOnce(t, r, 8, "sleep 0.3")
	if n := testutilCount(sshSessionsRefused) - before; n > 16 {
		t.Fatalf("%d sessions refused in the second burst of 8 commands, want the learned limit kept to", int(n))
	} else {
		t.Logf("%d sessions refused in the second burst", int(n))
	}
	if c.busy() {
		t.Fatal("slots still held after every command ended")
	}
	// A connection closed for being idle forgets the limit: the next one
	// starts from --ssh-max-sessions, and learns sshd's again.
	p.closeIdle(time.Now().Add(time.Hour))
	c.lim.Lock()
	limit, reserved = c.limit, c.reserved
	c.lim.Unlock()
	if limit != 8 || reserved != 0 || len(c.sem) != 0 {
		t.Fatalf("after the idle connection closed: limit %d, %d reserved, %d slots taken; want 8, 0, 0", limit, reserved, len(c.sem))
	}
	runAtOnce(t, r, 8, "sleep 0.3")
	c.lim.Lock()
	limit = c.limit
	c.lim.Unlock()
	if limit != 2 {
		t.Fatalf("limit %d on the new connection, want sshd's 2 learned again", limit)
	}
}

// --ssh-session-wait bounds the retries of a session sshd refuses, and the
// error is classified: ErrSessionsRefused, and ErrSession. Commands
// queued behind the one that waited fail at once: sshd has refused every
// session on the connection for that long already.
func TestSessionWaitBoundsRefusals(t *testing.T) {
	t.Parallel()
	f := maxSessionsHost(t, 0)
	r := poolFor(t, f, SSHConfig{SessionWait: time.Second}).Runner(f.Hosts[0].Addr, "")
	start := time.Now()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := r.Run(context.Background(), hostexec.Command{Script: "true"})
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; !errors.Is(err, hostexec.ErrSessionsRefused) || !errors.Is(err, hostexec.ErrSession) {
			t.Fatalf("%v, want ErrSessionsRefused", err)
		}
	}
	// About 1s; the upper bound leaves room for a loaded machine (without
	// the bound they waited for ever).
	if took := time.Since(start); took < time.Second || took > 15*time.Second {
		t.Fatalf("4 commands failed after %s, want about 1s", took)
	}
}

// Drain (a worker stopping) ends every wait for a session at once with
// ErrDraining, BeforeStart not called, while the command that runs goes
// on to its end; later commands do not start either.
func TestDrainEndsWaitsForSessions(t *testing.T) {
	t.Parallel()
	f := maxSessionsHost(t, 1)
	p := poolFor(t, f, SSHConfig{})
	r := p.Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	ctx := context.Background()
	started := make(chan struct{})
	type ended struct {
		name string
		res  hostexec.Result
		err  error
	}
	done := make(chan ended, 4)
	go func() {
		res, err := r.Run(ctx, hostexec.Command{Script: "sleep 2; echo running", BeforeStart: func() error { close(started); return nil }})
		done <- ended{"running", res, err}
	}()
	<-started
	var announced sync.Map
	for _, name := range []string{"plain", "durable", "durable2"} {
		go func() {
			cmd := hostexec.Attempt{Command: hostexec.Command{Script: "echo " + name, BeforeStart: func() error { announced.Store(name, true); return nil }}}
			if name != "plain" {
				cmd.ID, cmd.Env = "w.1.f."+name+".1", map[string]string{"GANTRY_ATTEMPTS": dir}
			}
			res, err := runAs(ctx, r, cmd)
			done <- ended{name, res, err}
		}()
	}
	time.Sleep(500 * time.Millisecond) // they wait for the one session sshd allows
	drained := time.Now()
	p.Drain()
	for range 3 {
		e := <-done
		if !errors.Is(e.err, hostexec.ErrDraining) {
			t.Fatalf("%s: %+v %v, want ErrDraining", e.name, e.res, e.err)
		}
		if took := time.Since(drained); took > time.Second {
			t.Fatalf("%s ended %s after Drain", e.name, took)
		}
	}
	announced.Range(func(k, _ any) bool {
		t.Errorf("%s was announced (BeforeStart) though it never started", k)
		return true
	})
	e := <-done
	if e.err != nil || e.res.Stdout != "running\n" {
		t.Fatalf("the command that ran when the pool drained: %+v %v", e.res, e.err)
	}
	if _, err := r.Run(ctx, hostexec.Command{Script: "true"}); !errors.Is(err, hostexec.ErrDraining) {
		t.Fatalf("a command after Drain: %v, want ErrDraining", err)
	}
}

// testutilCount is a counter's value.
func testutilCount(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
