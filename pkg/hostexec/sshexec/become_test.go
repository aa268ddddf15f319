package sshexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/linestest"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// becomeHost is a test sshd with a throwaway login user whose sudo needs
// no password (a sudoers rule of the test), and a runner logging in as
// that user.
type becomeHost struct {
	f     *sshtest.Fleet
	login string
	r     hostexec.AttemptRunner
	p     *Pool
}

func newBecomeHost(t *testing.T) *becomeHost {
	t.Helper()
	sshtest.EnsureSudo(t)
	f := sshtest.Start(t, 1, sshtest.Options{})
	login := f.AddUser(t)
	sshtest.Sudoers(t, login+" ALL=(ALL) NOPASSWD: ALL")
	p := newPool(t, f, f.KnownHosts)
	return &becomeHost{f: f, login: login, p: p, r: p.Runner(f.Hosts[0].Addr, login)}
}

// owner is the user owning path.
func owner(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.LookupId(strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)))
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// sharedDir is a directory every user may write in, removed with the
// test.
func sharedDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "become-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o1777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// become: true runs the command through sudo -n as root, plain and
// durable (in a host agent, and in a session supervisor), with its
// environment and secrets (stdin still empty); without it, the same
// command runs as the login user.
func TestBecomeWritesRootOwnedFile(t *testing.T) {
	h := newBecomeHost(t)
	dir := sharedDir(t)
	script := `id -un; echo "$HOME"; echo "$A $S" >"$OUT"; if IFS= read -r x; then echo "stdin: $x"; fi`
	for _, c := range []struct {
		name    string
		attempt string
		session bool // in a session supervisor, not an agent
	}{
		{"plain", "", false},
		{"in an agent", "w.1.create.f.n.1.run", false},
		{"in a session supervisor", "w.1.create.f.n.2.run", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			env := map[string]string{"A": "env-a", "OUT": out}
			secrets := map[string]string{"S": "s3cret-value"}
			r := h.r
			if c.attempt != "" {
				env["GANTRY_ATTEMPTS"] = t.TempDir()
			}
			if c.session {
				r = sessionSupervised(r)
			}
			cmd := hostexec.Attempt{ID: c.attempt, Command: hostexec.Command{Script: script, Env: env, Secrets: secrets, Become: true}}
			res, err := runAs(context.Background(), r, cmd)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%+v %v", res, err)
			}
			if res.Stdout != "root\n/root\n" {
				t.Errorf("stdout %q, want root and its home (sudo -H)", res.Stdout)
			}
			if b, _ := os.ReadFile(out); string(b) != "env-a s3cret-value\n" || owner(t, out) != "root" {
				t.Errorf("file %q owned by %s, want the environment and the secret, owned by root", b, owner(t, out))
			}
			cmd.Become = false // the login user's attempts are in its home
			delete(cmd.Env, "GANTRY_ATTEMPTS")
			cmd.Env["OUT"] = out + ".plain"
			res, err = runAs(context.Background(), r, cmd)
			if err != nil || !strings.HasPrefix(res.Stdout, h.login+"\n") || owner(t, out+".plain") != h.login {
				t.Errorf("without become: %+v %v, want the login user", res, err)
			}
		})
	}
}

// become_user runs the command as that user, its attempt's files in that
// user's home.
func TestBecomeUser(t *testing.T) {
	h := newBecomeHost(t)
	app := sshtest.AddSystemUser(t)
	res, err := h.r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w.1.create.f.n.1.run", Command: hostexec.Command{Script: "id -un; echo $HOME", Become: true, BecomeUser: app}})
	if err != nil || res.Stdout != app+"\n/home/"+app+"\n" {
		t.Fatalf("%+v %v, want %s", res, err, app)
	}
	run := "/home/" + app + "/.gantry/attempts/w.1.create.f.n.1.run.run"
	if owner(t, run) != app {
		t.Errorf("the attempt's run file is %s's, want %s's", owner(t, run), app)
	}
	// the same connection's agents, for another user and for none
	for _, as := range []string{"", app, h.login} {
		cmd := hostexec.Attempt{ID: "w.1.create.f.n.2." + as, Command: hostexec.Command{Script: "id -un", Become: as != h.login, BecomeUser: as}}
		want := as
		if as == "" {
			want = "root"
			cmd.Env = map[string]string{"GANTRY_ATTEMPTS": t.TempDir()} // not root's home: the machine's
		}
		if res, err := h.r.RunAttempt(context.Background(), cmd); err != nil || res.Stdout != want+"\n" {
			t.Errorf("become_user %q: %+v %v, want %s", as, res, err, want)
		}
	}
}

// A login user whose sudo wants a password fails a become command at
// once, saying so, with nothing started.
func TestBecomeNeedsPassword(t *testing.T) {
	sshtest.EnsureSudo(t)
	f := sshtest.Start(t, 1, sshtest.Options{})
	login := f.AddUser(t)
	sshtest.Sudoers(t, login+" ALL=(ALL) ALL")
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, login)
	for _, attempt := range []string{"", "w.1.create.f.n.1.run"} {
		started := false
		start := time.Now()
		_, err := runAs(context.Background(), r, hostexec.Attempt{ID: attempt, Command: hostexec.Command{Script: "touch /tmp/never", Become: true, BeforeStart: func() error { started = true; return nil }}})
		want := fmt.Sprintf("sudo on %s needs a password for %s; gantry runs sudo -n and never types one: allow NOPASSWD for %s", f.Hosts[0].Addr, login, login)
		if !errors.Is(err, hostexec.ErrBecome) || !strings.Contains(err.Error(), want) || started {
			t.Errorf("attempt %q: err %v (started %v), want ErrBecome saying %q", attempt, err, started, want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("attempt %q: failed after %s, want at once", attempt, d)
		}
	}
	if _, err := (localexec.Local{}).Run(context.Background(), hostexec.Command{Script: "true", Become: true}); !errors.Is(err, hostexec.ErrBecome) {
		t.Errorf("transport local with become: %v, want ErrBecome", err)
	}
}

// uidOf is the real uid of a running process, or -1.
func uidOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

// waitPid waits for a pid written to path.
func waitPid(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			return pid
		}
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// Cancelling a become command kills its root-owned processes (the login
// user could not), plain and durable, and a settle of a become attempt
// kills it too; the kill is confirmed.
func TestBecomeCancelKillsRootProcess(t *testing.T) {
	h := newBecomeHost(t)
	dir := sharedDir(t)
	for _, c := range []struct {
		name, attempt   string
		session, settle bool
	}{
		{"plain", "", false, false},
		{"in an agent", "w.1.create.f.n.1.run", false, false},
		{"in a session supervisor", "w.1.create.f.n.2.run", true, false},
		{"settled", "w.1.create.f.n.3.run", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pidFile := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			env, secrets := map[string]string{"P": pidFile}, map[string]string{}
			r := h.r
			if c.attempt != "" {
				env["GANTRY_ATTEMPTS"] = t.TempDir()
			}
			if c.session {
				r = sessionSupervised(r)
			}
			cmd := hostexec.Attempt{ID: c.attempt, Command: hostexec.Command{Script: `sleep 60 & echo $! >"$P"; wait`, Env: env, Secrets: secrets, Become: true}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { _, err := runAs(ctx, r, cmd); done <- err }()
			pid := waitPid(t, pidFile)
			if uid := uidOf(pid); uid != 0 {
				t.Fatalf("sleep %d runs as uid %d, want root", pid, uid)
			}
			if c.settle {
				res, err := h.r.Settle(context.Background(), hostexec.Attempt{ID: c.attempt, Command: hostexec.Command{Env: env, Become: true}})
				if !errors.Is(err, hostexec.ErrCancelled) || res.ExitCode != 143 {
					t.Fatalf("settle: %+v %v, want the attempt killed", res, err)
				}
			} else {
				cancel()
			}
			select {
			case err := <-done:
				if !c.settle && (!errors.Is(err, hostexec.ErrCancelled) || errors.Is(err, hostexec.ErrKill)) {
					t.Fatalf("err %v, want cancelled with the kill confirmed", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the cancelled command did not end")
			}
			if running(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("the root-owned sleep %d outlived the cancel", pid)
			}
		})
	}
}

// A become attempt whose connection ends while it runs is re-attached
// (through sudo, to its files in root's home) and runs once.
func TestBecomeReattach(t *testing.T) {
	h := newBecomeHost(t)
	dir := sharedDir(t)
	l := linestest.New("line1")
	cmd := durable(dir, "w1.1.f.n.1", l.On)
	cmd.Become = true
	type ran struct {
		res hostexec.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := h.r.RunAttempt(context.Background(), cmd)
		done <- ran{res, err}
	}()
	l.Wait(t, "line1")
	h.p.mu.Lock()
	for _, c := range h.p.conns {
		c.mu.Lock()
		if c.client != nil {
			_ = c.client.Close()
		}
		c.mu.Unlock()
	}
	h.p.mu.Unlock()
	r := <-done
	if r.err != nil || r.res.ExitCode != 7 || !strings.Contains(r.res.Stdout, "line2") {
		t.Fatalf("%+v %v", r.res, r.err)
	}
	if c := counted(t, dir); c != "start end" {
		t.Fatalf("the host saw %q, want one start and one end", c)
	}
	if owner(t, filepath.Join(dir, "w1.1.f.n.1.run")) != "root" {
		t.Fatal("the attempt's files are not root's")
	}
}

// While a become command with a secret runs, no process on the host has
// the value in its argv (sudo's included): it still travels on stdin.
func TestBecomeSecretsNotInArgv(t *testing.T) {
	h := newBecomeHost(t)
	v := secretValue(t)
	scanWhileRunning(t, h.r, hostexec.Command{Script: "sleep 1", Become: true, Secrets: map[string]string{"GANTRY_TEST_SECRET": v}}, v)
}
