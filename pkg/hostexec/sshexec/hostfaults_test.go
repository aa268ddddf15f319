package sshexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/linestest"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// pidAlive reads a pid from file and says whether it still runs (the
// loopback host is this machine; a zombie does not run).
func pidAlive(t *testing.T, file string) (int, bool) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid := mustAtoi(t, string(b))
	return pid, running(pid)
}

// With sshd's MaxSessions 1 the host agent running an attempt holds the
// connection's only session, and sshd keeps it while the attempt runs,
// closed or not: the kill of a timed-out attempt dials a connection of its
// own (it was refused, and the command ran on).
func TestTimeoutKilledWithMaxSessions1(t *testing.T) {
	for _, kind := range []string{"durable", "plain"} {
		t.Run(kind, func(t *testing.T) {
			f := maxSessionsHost(t, 1)
			r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
			dir := t.TempDir()
			pidf := filepath.Join(dir, "pid")
			cmd := hostexec.Attempt{Command: hostexec.Command{Script: "echo $$ >" + pidf + "; exec sleep 30", Timeout: 2 * time.Second,
				Env: map[string]string{"GANTRY_ATTEMPTS": dir}}}
			if kind == "durable" {
				cmd.ID, cmd.Lock = "w.1.create.f.n.1.run", "c.f.n"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			_, err := runAs(ctx, r, cmd)
			took := time.Since(start)
			pid, alive := pidAlive(t, pidf)
			t.Logf("took %s: %v; command pid %d alive=%v", took.Round(time.Millisecond), err, pid, alive)
			if alive {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("the timed-out command still runs on the host after Run returned (%v)", err)
			}
			if errors.Is(err, hostexec.ErrKill) {
				t.Errorf("kill not confirmed: %v", err)
			}
		})
	}
}

// sshd's default MaxSessions (10) and gantry's default --ssh-max-sessions
// (8): eight attempts on one host cancelled together (a formula's or a
// composition's deadline ends every node of it at once) are each killed,
// confirmed: each kill's session is asked for again while sshd refuses
// it, and the attempts' own sessions are closed first (6 of 8 kills were
// refused, their commands left running).
func TestAttemptsCancelledTogetherAreAllKilled(t *testing.T) {
	f := maxSessionsHost(t, 10)
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	n := 8
	type out struct {
		i   int
		err error
	}
	done := make(chan out, n)
	ctx, cancel := context.WithCancel(context.Background())
	l := linestest.New()
	for i := range n {
		go func() {
			pidf := filepath.Join(dir, "pid"+strconv.Itoa(i))
			cmd := hostexec.Attempt{ID: "w.1.create.f.n" + strconv.Itoa(i) + ".1.run", Lock: "c.f.n" + strconv.Itoa(i),
				Command: hostexec.Command{Script: "echo $$ >" + pidf + "; echo up; exec sleep 30", OnLine: l.On, Env: map[string]string{"GANTRY_ATTEMPTS": dir}}}
			_, err := r.RunAttempt(ctx, cmd)
			done <- out{i, err}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		m, _ := filepath.Glob(filepath.Join(dir, "pid*"))
		if len(m) == n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // follow sessions open too
	cancel()
	unconfirmed := 0
	for range n {
		select {
		case o := <-done:
			if errors.Is(o.err, hostexec.ErrKill) {
				unconfirmed++
				t.Logf("attempt %d: %v", o.i, o.err)
			}
		case <-time.After(40 * time.Second):
			t.Fatal("an attempt still runs 40s after the cancel")
		}
	}
	alive := 0
	for i := range n {
		pid, ok := pidAlive(t, filepath.Join(dir, "pid"+strconv.Itoa(i)))
		if ok {
			alive++
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if unconfirmed > 0 || alive > 0 {
		t.Errorf("of %d attempts cancelled at once, %d kills not confirmed, %d commands still running on the host", n, unconfirmed, alive)
	}
}

// A node's timeout (or a cancel) while its host hangs: the command's
// Timeout is 3s, the host freezes after the command started; Run ends
// when the timeout passes and the kill finds no answer (killOpenWait), not
// when the keepalives close the connection (45 s by default; never with
// them off), and says the kill was not confirmed.
func TestTimeoutOnAHungHostEndsSoon(t *testing.T) {
	for _, kind := range []string{"durable", "plain"} {
		t.Run(kind, func(t *testing.T) {
			f := sshtest.Start(t, 1, sshtest.Options{})
			r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "") // default keepalive 15s
			l := linestest.New("up")
			cmd := hostexec.Attempt{Command: hostexec.Command{Script: "echo up; sleep 120", OnLine: l.On, Timeout: 3 * time.Second, Env: map[string]string{"GANTRY_ATTEMPTS": t.TempDir()}}}
			if kind == "durable" {
				cmd.ID = "w.1.create.f.n.1.run"
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() { _, err := runAs(context.Background(), r, cmd); done <- err }()
			l.Wait(t, "up")
			thaw := f.Hosts[0].Freeze()
			defer thaw()
			bound := cmd.Timeout + killOpenWait + cmdrun.KillGrace + 3*time.Second
			select {
			case err := <-done:
				took := time.Since(start)
				t.Logf("ended %s after the start: %v", took.Round(time.Millisecond), err)
				if took > bound {
					t.Errorf("a 3s timeout on a hung host ended the run after %s (want within %s)", took.Round(time.Millisecond), bound)
				}
				if !errors.Is(err, hostexec.ErrTimeout) || !errors.Is(err, hostexec.ErrKill) {
					t.Errorf("err = %v, want the timeout and the kill not confirmed", err)
				}
				if errors.Is(err, hostexec.ErrStoppedAnswering) {
					t.Errorf("err = %v: a host that stopped answering after the command started is not unreachable (nothing ran there)", err)
				}
			case <-time.After(100 * time.Second):
				t.Fatal("still running 100s after the start")
			}
		})
	}
}

// A host whose clock jumped forward (a VM restored from a snapshot, a
// board without an RTC, corrected by NTP) while an attempt runs: the day's
// sweep of attempt files older than 7 days leaves the running attempt's
// files (its run file is its claim), and the attempt run again (a
// re-delivery after the executor died) re-attaches and reads its exit
// status (the sweep took them, and the re-attach followed pid 0 forever).
func TestSweepLeavesARunningAttempt(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	l := linestest.New("up")
	mk := func(id string, on func(hostexec.Stream, string)) hostexec.Attempt {
		return hostexec.Attempt{ID: id, Lock: "c.f.n", Command: hostexec.Command{OnLine: on, Env: map[string]string{"GANTRY_ATTEMPTS": dir},
			Script: "echo start >>" + count + "; echo up; sleep 4; echo end >>" + count}}
	}
	p1 := newPool(t, f, f.KnownHosts)
	go func() {
		_, _ = p1.Runner(f.Hosts[0].Addr, "").RunAttempt(context.Background(), mk("w.1.create.f.n.1.run", l.On))
	}()
	l.Wait(t, "up")
	p1.Close() // the executor dies
	// the host's clock jumps 10 days forward: the claim looks 10 days old
	old := time.Now().Add(-10 * 24 * time.Hour)
	for _, s := range []string{".run", ".out", ".err", ".id"} {
		_ = os.Chtimes(filepath.Join(dir, "w.1.create.f.n.1.run"+s), old, old)
	}
	day := hostsh.SweepDay
	hostsh.SweepDay = func() string { return "29990101" } // the next day's first attempt sweeps
	defer func() { hostsh.SweepDay = day }()
	p2 := newPool(t, f, f.KnownHosts)
	r2 := p2.Runner(f.Hosts[0].Addr, "")
	if _, err := r2.RunAttempt(context.Background(), hostexec.Attempt{ID: "w.2.create.f.other.1.run", Command: hostexec.Command{Script: "true", Env: map[string]string{"GANTRY_ATTEMPTS": dir}}}); err != nil {
		t.Fatal(err)
	}
	ls, _ := filepath.Glob(filepath.Join(dir, "w.1.create.f.n.1.run*"))
	t.Logf("after the sweep: %v", ls)
	time.Sleep(5 * time.Second) // the first attempt ends meanwhile
	rb, _ := os.ReadFile(filepath.Join(dir, "w.1.create.f.n.1.run.run"))
	t.Logf("run file now: %q", rb)
	// the re-delivery re-attaches to the same attempt id
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	res, err := r2.RunAttempt(ctx, mk("w.1.create.f.n.1.run", nil))
	t.Logf("re-attach took %s", time.Since(start).Round(time.Millisecond))
	if err != nil || res.ExitCode != 0 {
		t.Errorf("the re-attach to an attempt that ended with 0: exit %d %v", res.ExitCode, err)
	}
	b, _ := os.ReadFile(count)
	t.Logf("re-attach: exit %d %v; count: %q", res.ExitCode, err, b)
	if got := strings.Count(string(b), "start"); got != 1 {
		t.Errorf("the attempt started %d times", got)
	}
}

// The day's sweep runs in a session of its own: a kill of an attempt
// that runs while it does neither stops it (it stopped, leaving most old
// files for the next day) nor takes it for one of the attempt's processes
// (the agent's kill then also took what an earlier attempt left running
// in the background).
func TestSweepOutlivesAKilledAttempt(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	const n = 3000
	ten := time.Now().Add(-10 * 24 * time.Hour)
	for i := range n {
		for _, ext := range []string{".run", ".out"} {
			p := filepath.Join(dir, "w"+strconv.Itoa(i)+".1.create.f.n.1.run"+ext)
			os.WriteFile(p, []byte("123\n0\n"), 0o600)
			os.Chtimes(p, ten, ten)
		}
	}
	env := map[string]string{"GANTRY_ATTEMPTS": dir}
	res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "d.1", Command: hostexec.Command{Script: "sleep 0.1; sleep 60 & echo $!", Env: env}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	left := mustAtoi(t, res.Stdout)
	t.Cleanup(func() { _ = syscall.Kill(left, syscall.SIGKILL) })
	if _, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "d.2", Command: hostexec.Command{Script: "sleep 60", Env: env, Timeout: 500 * time.Millisecond}}); !errors.Is(err, hostexec.ErrTimeout) {
		t.Fatalf("the second attempt: %v, want its timeout", err)
	}
	if !running(left) {
		t.Error("what the first attempt left running in the background was killed with the second attempt")
	}
	old := func() int { m, _ := filepath.Glob(filepath.Join(dir, "w*.run.run")); return len(m) }
	for end := time.Now().Add(20 * time.Second); old() > 0 && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	if k := old(); k > 0 {
		t.Errorf("%d of %d old attempts left: the sweep was stopped with the killed attempt", k, n)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatal(err)
	}
	return i
}
