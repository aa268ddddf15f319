package sshexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/linestest"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// settleChecks settles, with r, the attempt "w1.1.f.n.1" of dir that
// runs "sleep <sleep>" and nobody follows any more: it is killed, and
// settled again it reads as killed; an attempt that never started, and
// one that ended by itself, are reported as such; nothing is started.
func settleChecks(t *testing.T, r hostexec.AttemptRunner, dir, sleep string) {
	t.Helper()
	env := map[string]string{"GANTRY_ATTEMPTS": dir}
	settle := func(attempt string) (hostexec.Result, error) {
		return r.Settle(context.Background(), hostexec.Attempt{ID: attempt, Command: hostexec.Command{Env: env, Script: "touch " + filepath.Join(dir, "started")}})
	}
	pid := runPid(t, dir, "w1.1.f.n.1")
	if _, err := os.Stat("/proc/self/stat"); err == nil && !fileExists(filepath.Join(dir, "w1.1.f.n.1.id")) {
		t.Fatal("the attempt's supervisor did not record who it is") // the kill below goes by it
	}
	start := time.Now()
	res, err := settle("w1.1.f.n.1")
	if !errors.Is(err, hostexec.ErrCancelled) || res.ExitCode != 143 || !strings.Contains(res.Stdout, "line1") || !strings.Contains(res.Stderr, "warn") {
		t.Fatalf("settling a running attempt: %+v %v, want it killed (143) with its output", res, err)
	}
	if live := liveMembers(pid); len(live) > 0 {
		t.Fatalf("process group %s still there after the settle: %v", pid, live)
	}
	if out, _ := exec.Command("pgrep", "-f", "^sleep "+sleep+"$").Output(); len(out) > 0 {
		t.Fatalf("the command still runs: %s", out)
	}
	t.Logf("killed in %v", time.Since(start).Round(time.Millisecond))
	if res, err := settle("w1.1.f.n.1"); !errors.Is(err, hostexec.ErrCancelled) || res.ExitCode != 143 {
		t.Fatalf("settled again: %+v %v, want it still reported killed", res, err)
	}
	if _, err := settle("w1.1.f.n.2"); !errors.Is(err, hostexec.ErrNoAttempt) {
		t.Fatalf("settling an attempt that never started: %v, want ErrNoAttempt", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "w1.1.f.n.2.run")); !os.IsNotExist(err) {
		t.Fatalf("settling an attempt that never started left a run file: %v", err)
	}
	if _, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w1.1.f.n.3", Command: hostexec.Command{Env: env, Script: "echo done; exit 7"}}); err != nil {
		t.Fatal(err)
	}
	if res, err := settle("w1.1.f.n.3"); err != nil || res.ExitCode != 7 || res.Stdout != "done\n" {
		t.Fatalf("settling an attempt that ended by itself: %+v %v, want its exit status 7", res, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "started")); !os.IsNotExist(err) {
		t.Fatal("a settle started the command")
	}
}

// An attempt whose worker died (its connection closed, the host agent
// running it goes on) is settled from another worker: killed and
// confirmed gone, its kill recorded.
func TestSettleSSH(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	dir := t.TempDir()
	sleep := fmt.Sprintf("30.%09d", time.Now().UnixNano()%1e9)
	l := linestest.New("line1")
	gone, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := gone.Runner(f.Hosts[0].Addr, "").RunAttempt(context.Background(), hostexec.Attempt{ID: "w1.1.f.n.1", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, OnLine: l.On,
			Script: "echo line1; echo warn >&2; sleep " + sleep + "; echo never"}})
		done <- err
	}()
	l.Wait(t, "line1")
	gone.Close() // the worker dies; the attempt goes on on the host
	<-done
	if out, _ := exec.Command("pgrep", "-f", "^sleep "+sleep+"$").Output(); len(out) == 0 {
		t.Fatal("the command did not outlive its worker")
	}
	settleChecks(t, newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, ""), dir, sleep)
}

// The same with transport local: the attempt's supervisor outlives the
// worker that started it.
func TestSettleLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sleep := fmt.Sprintf("30.%09d", time.Now().UnixNano()%1e9)
	first := exec.Command("/bin/sh", "-c", sessionScript(hostexec.Attempt{ID: "w1.1.f.n.1", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir},
		Script: "echo line1; echo warn >&2; sleep " + sleep + "; echo never"}}))
	first.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, _ := first.StdoutPipe()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{}) // as init reaps an orphan (a zombie would look alive)
	go func() { _ = first.Wait(); close(reaped) }()
	defer func() { <-reaped }()
	buf := make([]byte, 4096)
	var seen string
	for !strings.Contains(seen, "line1") {
		n, err := stdout.Read(buf)
		if err != nil {
			t.Fatalf("first run: %v (%q)", err, seen)
		}
		seen += string(buf[:n])
	}
	stdout.Close() // the worker dies
	settleChecks(t, localexec.Local{}, dir, sleep)
}

// liveMembers lists the processes of process group pgid that still run:
// an exited one that its parent (or init) has not reaped yet, a zombie,
// holds nothing, and is not listed.
func liveMembers(pgid string) []string {
	var live []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndex(s, ") "); i >= 0 {
			s = s[i+2:]
		}
		fields := strings.Fields(s) // state, ppid, pgrp, ...
		if len(fields) > 2 && fields[2] == pgid && fields[0] != "Z" {
			live = append(live, strings.TrimSuffix(strings.TrimPrefix(f, "/proc/"), "/stat"))
		}
	}
	return live
}

// running says a process runs (exists and is no zombie).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndex(s, ") "); i >= 0 {
		s = s[i+2:]
	}
	return !strings.HasPrefix(s, "Z")
}
