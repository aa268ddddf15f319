package sshexec

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// bootID is this machine's boot id.
func bootID(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skipf("no boot id here: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// procStart is the start time of process pid (field 22 of its stat).
func procStart(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndex(string(b), ") ")
	return strings.Fields(string(b)[i+2:])[19]
}

// bystander starts a process group that has nothing to do with gantry
// (as a boot-time daemon that got an attempt's pid after a reboot), and
// returns its pid and a function that says whether it still runs.
func bystander(t *testing.T) (int, func() bool) {
	t.Helper()
	c := exec.Command("/bin/sh", "-c", "sleep 1000 & wait")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	exited := make(chan struct{})
	go func() { _ = c.Wait(); close(exited) }()
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL); <-exited })
	return pid, func() bool {
		select {
		case <-exited:
			return false
		default:
			return syscall.Kill(-pid, 0) == nil
		}
	}
}

// orphanedAttempt records attempt in dir as started by a supervisor with
// pid and identity id (boot id, start time) that never recorded an exit
// status: the host restarted under it.
func orphanedAttempt(t *testing.T, dir, attempt string, pid int, id string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, attempt+".run"), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, attempt+".id"), []byte(id+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".out", ".err"} {
		if err := os.WriteFile(filepath.Join(dir, attempt+ext), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// reusedPidCases runs check with each runner, for an attempt whose
// supervisor's pid is now held by another process (the host restarted:
// same pid, another start time or another boot).
func reusedPidCases(t *testing.T, check func(t *testing.T, r hostexec.AttemptRunner, dir string, pid int, id string, alive func() bool)) {
	boot := bootID(t)
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cases := map[string]func(pid int) string{
				"same boot, reused pid": func(pid int) string { return boot + " 1" },
				"another boot":          func(pid int) string { return "0b0b0b0b-0000-4000-8000-000000000000 " + procStart(t, pid) },
			}
			for what, id := range cases {
				t.Run(what, func(t *testing.T) {
					pid, alive := bystander(t)
					check(t, r, t.TempDir(), pid, id(pid), alive)
				})
			}
		})
	}
}

// Such an attempt is lost: a settle signals nothing and says so.
func TestSettleReusedPidIsLost(t *testing.T) {
	t.Parallel()
	reusedPidCases(t, func(t *testing.T, r hostexec.AttemptRunner, dir string, pid int, id string, alive func() bool) {
		orphanedAttempt(t, dir, "w1.1.f.n.1", pid, id)
		res, err := r.Settle(context.Background(), hostexec.Attempt{ID: "w1.1.f.n.1", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, Script: "true"}})
		if !alive() {
			t.Fatalf("the settle killed process group %d, which is not the attempt's (%+v %v)", pid, res, err)
		}
		if !errors.Is(err, hostexec.ErrLost) {
			t.Fatalf("settle: %+v %v, want ErrLost", res, err)
		}
	})
}

// A re-attach to such an attempt does not wait for that process: the
// attempt is lost, nothing is signalled and nothing started.
func TestReattachReusedPidIsLost(t *testing.T) {
	t.Parallel()
	reusedPidCases(t, func(t *testing.T, r hostexec.AttemptRunner, dir string, pid int, id string, alive func() bool) {
		orphanedAttempt(t, dir, "w1.1.f.n.1", pid, id)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		res, err := r.RunAttempt(ctx, hostexec.Attempt{ID: "w1.1.f.n.1", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, Script: "touch " + hostsh.Quote(filepath.Join(dir, "started"))}})
		if !alive() {
			t.Fatalf("the re-attach killed process group %d, which is not the attempt's", pid)
		}
		if !errors.Is(err, hostexec.ErrLost) {
			t.Fatalf("re-attach: %+v %v after %v, want ErrLost", res, err, time.Since(start).Round(time.Millisecond))
		}
		if _, err := os.Stat(filepath.Join(dir, "started")); !os.IsNotExist(err) {
			t.Fatal("the re-attach started the command")
		}
	})
}

// Every supervisor records who it is (boot id, start time) next to its
// pid: over SSH (the host agent, the session supervisor) and with
// transport local (the attempt's supervising shell).
func TestAttemptIdentityRecorded(t *testing.T) {
	t.Parallel()
	boot := bootID(t)
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for i := 1; i <= 6; i++ {
				a := "w1.1.f.n." + strconv.Itoa(i)
				lock := "" // and, every other attempt, with the host lock: taken before the claim
				if i%2 == 0 {
					lock = "host"
				}
				if _, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: a, Lock: lock, Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, Script: "true"}}); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(dir, a+".id"))
				if err != nil {
					t.Fatal(err)
				}
				f := strings.Fields(string(b))
				if len(f) != 2 || f[0] != boot {
					t.Fatalf("%s.id: %q, want the boot id %s and a start time", a, b, boot)
				}
				if _, err := strconv.ParseUint(f[1], 10, 64); err != nil {
					t.Fatalf("%s.id: %q: start time: %v", a, b, err)
				}
			}
		})
	}
	// the session supervisor
	dir := t.TempDir()
	for _, lock := range []string{"", "host"} {
		cmd := hostexec.Attempt{ID: "w1.1.f.n.1" + lock, Lock: lock, Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, Script: "true"}}
		if out, err := exec.Command("/bin/sh", "-c", sessionScript(cmd)).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "w1.1.f.n.1"+lock+".id")); !strings.HasPrefix(string(b), boot+" ") {
			t.Fatalf("the session supervisor (lock %q) recorded %q", lock, b)
		}
	}
}
