package sshexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

func newPool(t *testing.T, f *sshtest.Fleet, known string) *Pool {
	t.Helper()
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: known, DefaultUser: f.User})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// sessionScript is the session supervisor's shell for the durable cmd,
// its secrets (if any) in the environment it starts with.
func sessionScript(cmd hostexec.Attempt) string {
	ex, _ := hostsh.Exports(cmd.Env)
	return hostsh.SuperviseScript(cmdrun.SupervisionOf(cmd, ex, false))
}

// runAs runs cmd with r: plain when cmd.ID is "", else as the durable
// attempt cmd.ID.
func runAs(ctx context.Context, r hostexec.AttemptRunner, cmd hostexec.Attempt) (hostexec.Result, error) {
	if cmd.ID == "" {
		return r.Run(ctx, cmd.Command)
	}
	return r.RunAttempt(ctx, cmd)
}

// sessionSupervised is r running its durable attempts in session
// supervisors, never in host agents.
func sessionSupervised(r hostexec.AttemptRunner) hostexec.AttemptRunner {
	c := *r.(*sshRunner)
	c.noAgents = true
	return &c
}

// runners gives the same checks to the SSH and local runners.
func runners(t *testing.T) map[string]hostexec.AttemptRunner {
	f := sshtest.Start(t, 1, sshtest.Options{})
	return map[string]hostexec.AttemptRunner{"ssh": newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, ""), "local": localexec.Local{}}
}

func TestRunOutputExitAndEnv(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var lines []string
			res, err := r.Run(context.Background(), hostexec.Command{
				Script: `echo "one $GREETING"; echo two >&2; printf 'no newline'; exit 3`,
				Env:    map[string]string{"GREETING": "it's here"},
				OnLine: func(s hostexec.Stream, l string) { mu.Lock(); lines = append(lines, string(s)+":"+l); mu.Unlock() },
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 3 || res.Stdout != "one it's here\nno newline\n" || res.Stderr != "two\n" {
				t.Fatalf("result %+v", res)
			}
			want := map[string]bool{"stdout:one it's here": true, "stderr:two": true, "stdout:no newline": true}
			if len(lines) != 3 {
				t.Fatalf("lines %q", lines)
			}
			for _, l := range lines {
				if !want[l] {
					t.Errorf("unexpected line %q (the pid marker must not show)", l)
				}
			}
		})
	}
}

// A timeout kills the command and everything it started: nothing is left
// running on the host.
func TestTimeoutLeavesNoProcess(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			marker := fmt.Sprintf("gantry-timeout-%s-%d", name, time.Now().UnixNano())
			start := time.Now()
			_, err := r.Run(context.Background(), hostexec.Command{
				Script:  "sleep 300 & sleep 301; echo " + marker,
				Timeout: 500 * time.Millisecond,
			})
			if !errors.Is(err, hostexec.ErrTimeout) {
				t.Fatalf("err = %v, want ErrTimeout", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s to give up", d)
			}
			// all on this machine: the loopback sshd's processes are visible
			deadline := time.Now().Add(5 * time.Second)
			for {
				out, _ := exec.Command("pgrep", "-f", marker).Output()
				if len(strings.TrimSpace(string(out))) == 0 {
					break
				}
				if time.Now().After(deadline) {
					ps, _ := exec.Command("pgrep", "-af", marker).Output()
					t.Fatalf("processes left behind:\n%s", ps)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// A cancel at any moment after the start, even before the command's first
// output arrives, kills it on the host.
func TestCancelKills(t *testing.T) {
	for name, r := range runners(t) {
		for _, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 300 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%s", name, after), func(t *testing.T) {
				marker := fmt.Sprintf("gantry-cancel-%s-%d", name, time.Now().UnixNano())
				ctx, cancel := context.WithCancel(context.Background())
				_, err := r.Run(ctx, hostexec.Command{Script: "sleep 60; echo " + marker, BeforeStart: func() error {
					time.AfterFunc(after, cancel)
					return nil
				}})
				if !errors.Is(err, hostexec.ErrCancelled) {
					t.Fatalf("err = %v, want ErrCancelled", err)
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					out, _ := exec.Command("pgrep", "-f", marker).Output()
					if strings.TrimSpace(string(out)) == "" {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("left running after cancel: %s", out)
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
	}
}

func TestUnknownHostKeyRefused(t *testing.T) {
	f := sshtest.Start(t, 2, sshtest.Options{})
	// known_hosts that lists only host-1: host-0 is unknown.
	all, _ := os.ReadFile(f.KnownHosts)
	lines := strings.Split(strings.TrimSpace(string(all)), "\n")
	only1 := t.TempDir() + "/known_hosts"
	os.WriteFile(only1, []byte(lines[1]+"\n"), 0o600)
	p := newPool(t, f, only1)
	_, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "touch " + f.Hosts[0].Dir + "/ran"})
	if !errors.Is(err, hostexec.ErrHostKeyUnknown) || !strings.Contains(err.Error(), "not in "+only1) {
		t.Fatalf("err = %v, want ErrHostKeyUnknown naming the file", err)
	}
	if _, serr := os.Stat(f.Hosts[0].Dir + "/ran"); serr == nil {
		t.Fatal("the command ran on a host with an unknown key")
	}
	// host-0's address with host-1's key: a changed key.
	h1 := strings.SplitN(lines[1], " ", 2)[1]
	swapped := t.TempDir() + "/known_hosts"
	os.WriteFile(swapped, []byte(strings.SplitN(lines[0], " ", 2)[0]+" "+h1+"\n"), 0o600)
	p = newPool(t, f, swapped)
	_, err = p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "true"})
	if !errors.Is(err, hostexec.ErrHostKeyChanged) {
		t.Fatalf("err = %v, want ErrHostKeyChanged", err)
	}
	// and with the right file it works
	p = newPool(t, f, f.KnownHosts)
	if res, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "true"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("known host: %+v %v", res, err)
	}
}

// One connection per host serves many concurrent commands, more than
// sshd's MaxSessions (10), without a session being refused.
func TestConnectionReuseWithinMaxSessions(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	p := newPool(t, f, f.KnownHosts)
	r := p.Runner(f.Hosts[0].Addr, "")
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.Run(context.Background(), hostexec.Command{Script: "sleep 0.2; echo ok"})
			if err == nil && res.Stdout != "ok\n" {
				err = fmt.Errorf("stdout %q", res.Stdout)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := len(p.conns); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
	// the pooled connection survives the host's sshd listener restarting
	first := p.conns[f.User+"@"+f.Hosts[0].Addr].client
	if _, err := r.Run(context.Background(), hostexec.Command{Script: "true"}); err != nil {
		t.Fatal(err)
	}
	if p.conns[f.User+"@"+f.Hosts[0].Addr].client != first {
		t.Fatal("connection was not reused")
	}
}

func TestConnectErrors(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	p := newPool(t, f, f.KnownHosts)
	f.Hosts[0].Stop()
	_, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "true"})
	if !errors.Is(err, hostexec.ErrConnect) {
		t.Fatalf("err = %v, want ErrConnect", err)
	}
	f.Hosts[0].Start()
	if _, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "true"}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if _, err := p.Runner(f.Hosts[0].Addr, "nobody-here").Run(context.Background(), hostexec.Command{Script: "true"}); !errors.Is(err, hostexec.ErrAuth) {
		t.Fatalf("wrong user: %v, want ErrAuth", err)
	}
	if _, err := NewPool(SSHConfig{KeyFile: "/nonexistent", KnownHosts: f.KnownHosts}); err == nil {
		t.Fatal("missing key accepted")
	}
	if _, err := (localexec.Local{}).Run(context.Background(), hostexec.Command{Script: "true", Env: map[string]string{"BAD NAME": "x"}}); err == nil {
		t.Fatal("bad env name accepted")
	}
}
