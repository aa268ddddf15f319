package localexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/linestest"
	"golang.org/x/sys/unix"
)

// warmPids waits until the pool holds a warm shell started with the
// worker's environment of now, and returns the pids of those it holds.
func warmPids(t *testing.T, l Local) []int {
	t.Helper()
	env := localEnv(nil)
	for range 500 {
		l.pre.warm.mu.Lock()
		var pids []int
		for _, w := range l.pre.warm.idle {
			if slices.Equal(w.env, env) {
				pids = append(pids, w.cmd.Process.Pid)
			}
		}
		l.pre.warm.mu.Unlock()
		if len(pids) > 0 {
			return pids
		}
		l.pre.warm.refill(env) // not one yet
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no warm shell was started in 5 s")
	return nil
}

// supervisorPid is the pid an attempt's run file records first.
func supervisorPid(t *testing.T, base, attempt string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(base, attempt+".run"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(first)
	if err != nil {
		t.Fatalf("run file %q: %v", b, err)
	}
	return pid
}

// A local durable attempt runs in a shell started before it was asked
// for: its supervisor's pid is one of the warm shells waiting beforehand.
// It gets its environment, secrets and output as a cold shell gives
// them, and records its exit status.
func TestWarmShellRunsTheAttempt(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	dir := t.TempDir()
	base := filepath.Join(dir, "attempts")
	waiting := warmPids(t, l)
	lines := linestest.New()
	res, err := l.Run(context.Background(), hostexec.Command{Attempt: "w.1.create.f.n.1.run", Lock: "c.f.n", OnLine: lines.On,
		Env: map[string]string{"GANTRY_ATTEMPTS": base, "MINE": "it's mine"}, Secrets: map[string]string{"TOKEN": "s3cret value"},
		Script: `echo "$MINE"; echo "$TOKEN" >&2; exit 3`})
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("%+v %v", res, err)
	}
	if res.Stdout != "it's mine\n" || res.Stderr != "***\n" { // the secret masked
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if got := strings.Join(slices.Sorted(slices.Values(lines.Got())), ","); got != "stderr:***,stdout:it's mine" {
		t.Fatalf("lines %s (the secret masked)", got)
	}
	if pid := supervisorPid(t, base, "w.1.create.f.n.1.run"); !slices.Contains(waiting, pid) {
		t.Fatalf("supervisor %d is not one of the warm shells %v", pid, waiting)
	}
	run, _ := os.ReadFile(filepath.Join(base, "w.1.create.f.n.1.run.run"))
	if n := strings.Split(strings.TrimSpace(string(run)), "\n"); len(n) != 2 || n[1] != "3" {
		t.Fatalf("run file %q: want the pid, then 3", run)
	}
	holder, _ := os.ReadFile(filepath.Join(dir, "locks", "c.f.n.holder"))
	if string(holder) != "w.1.create.f.n.1.run\n" {
		t.Fatalf("holder %q", holder)
	}
}

// The host lock of an attempt in a warm shell is the shell's: while the
// command runs nobody else can take it, though the worker holds no
// descriptor of the lock file, so it would hold if the worker died.
func TestWarmShellHoldsTheLock(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	dir := t.TempDir()
	base := filepath.Join(dir, "attempts")
	if err := os.MkdirAll(filepath.Join(dir, "locks"), 0o700); err != nil {
		t.Fatal(err)
	}
	waiting := warmPids(t, l)
	gate := filepath.Join(dir, "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) }) // ends the command if the test fails first
	started := linestest.New("running")
	done := make(chan hostexec.Result, 1)
	go func() {
		res, err := l.Run(context.Background(), hostexec.Command{Attempt: "w.1.create.f.n.1.run", Lock: "c.f.n", OnLine: started.On,
			Env:    map[string]string{"GANTRY_ATTEMPTS": base},
			Script: `echo running; i=0; while [ ! -e ` + hostsh.Quote(gate) + ` ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done`})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	started.Wait(t, "running")
	lockFile := filepath.Join(dir, "locks", "c.f.n")
	if own := openedHere(t, lockFile); own {
		t.Fatal("the worker keeps a descriptor of the lock file")
	}
	f, err := os.OpenFile(lockFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock while the command runs: %v, want EWOULDBLOCK", err)
	}
	if pid := supervisorPid(t, base, "w.1.create.f.n.1.run"); !slices.Contains(waiting, pid) {
		t.Fatalf("supervisor %d is not one of the warm shells %v", pid, waiting)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock once the attempt ended: %v", err)
	}
}

// openedHere says whether this process has path open.
func openedHere(t *testing.T, path string) bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && l == path {
			return true
		}
	}
	return false
}

// A warm shell whose attempt never comes to it (the worker's environment
// changed since it started) is ended without running anything, and the
// attempt runs with the environment of now.
func TestWarmShellOfAnOldEnvironmentIsNotUsed(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	dir := t.TempDir()
	base := filepath.Join(dir, "attempts")
	old := warmPids(t, l)
	t.Setenv("LANG", "C.warm-test")
	res, err := l.Run(context.Background(), hostexec.Command{Attempt: "w.1.create.f.n.1.run", Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: `echo "$LANG"`})
	if err != nil || res.Stdout != "C.warm-test\n" {
		t.Fatalf("%+v %v", res, err)
	}
	if pid := supervisorPid(t, base, "w.1.create.f.n.1.run"); slices.Contains(old, pid) {
		t.Fatalf("the attempt ran in warm shell %d, started with the old environment", pid)
	}
	for _, pid := range old {
		gone := false
		for range 200 {
			if syscall.Kill(pid, 0) != nil {
				gone = true
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !gone {
			t.Fatalf("warm shell %d of the old environment is still there", pid)
		}
	}
}

// A warm shell that cannot take the attempt (here: it died while it
// waited in the pool) costs nothing but itself: the attempt runs the cold
// way, once, holding its lock.
func TestWarmShellLostAttemptRunsCold(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	dir := t.TempDir()
	base := filepath.Join(dir, "attempts")
	waiting := warmPids(t, l)
	for _, pid := range waiting {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	count := filepath.Join(dir, "count")
	res, err := l.Run(context.Background(), hostexec.Command{Attempt: "w.1.create.f.n.1.run", Lock: "c.f.n",
		Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: `echo ran >>` + hostsh.Quote(count)})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if b, _ := os.ReadFile(count); string(b) != "ran\n" {
		t.Fatalf("the command ran %q times", b)
	}
	if res.Stderr != "" { // nothing of the warm shell that did not run it
		t.Fatalf("stderr %q", res.Stderr)
	}
	if pid := supervisorPid(t, base, "w.1.create.f.n.1.run"); slices.Contains(waiting, pid) {
		t.Fatalf("supervisor %d is a warm shell, which was dead", pid)
	}
	if _, err := os.Stat(filepath.Join(dir, "locks", "c.f.n.holder")); err != nil {
		t.Fatalf("the cold shell took the lock: %v", err)
	}
}

// Where pidfd_getfd is refused (an old kernel, a seccomp profile), the
// warm shell is let go, and attempts with a lock go the cold way from then
// on: the worker takes the lock on a descriptor of its own and hands it
// over, with no flock(1) either; each runs once, holding the lock.
func TestWarmShellWithoutPidfdGetfd(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	dir := t.TempDir()
	calls := linestest.CountFlock(t, dir)
	pidfdGetfd = func(int, int, int) (int, error) { return -1, syscall.EPERM }
	defer func() { pidfdGetfd = unix.PidfdGetfd; l.pre.warm.noPidfd.Store(false) }()
	base := filepath.Join(dir, "attempts")
	if err := os.MkdirAll(filepath.Join(dir, "locks"), 0o700); err != nil {
		t.Fatal(err)
	}
	waiting := warmPids(t, l)
	count := filepath.Join(dir, "count")
	for i, want := range []struct {
		warm  bool
		flock string
	}{{false, ""}, {false, ""}} { // the cold way: the worker locks and hands the file over
		id := "w.1.create.f.n." + strconv.Itoa(i+1) + ".run"
		res, err := l.Run(context.Background(), hostexec.Command{Attempt: id, Lock: "c.f.n", Env: map[string]string{"GANTRY_ATTEMPTS": base},
			Script: `echo ran >>` + hostsh.Quote(count)})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("attempt %d: %+v %v", i+1, res, err)
		}
		if pid := supervisorPid(t, base, id); slices.Contains(waiting, pid) != want.warm {
			t.Fatalf("attempt %d ran in a warm shell: %v, want %v", i+1, !want.warm, want.warm)
		}
		b, _ := os.ReadFile(calls)
		if string(b) != want.flock {
			t.Fatalf("attempt %d: flock calls %q, want %q", i+1, b, want.flock)
		}
		_ = os.Remove(calls)
	}
	if b, _ := os.ReadFile(count); string(b) != "ran\nran\n" {
		t.Fatalf("the commands ran %q", b)
	}
}

// The worker may die while it writes a warm shell's script, which the
// shell then reads cut short. A cut script runs nothing, or runs the
// command and records its exit status: never the command without its
// status, which a re-attach would report as lost (and the step would be
// run again).
func TestWarmShellCutScript(t *testing.T) {
	dir := t.TempDir()
	att, ran := filepath.Join(dir, "w.1"), filepath.Join(dir, "ran")
	rest := warmRest(hostexec.Command{Attempt: "w.1", Secrets: map[string]string{"TOKEN": "s3cret"}, Script: "echo ran >>" + hostsh.Quote(ran)}, "export A='a'; ")
	for cut := range len(rest) {
		for _, p := range []string{ran, att + ".run", att + ".out", att + ".err"} {
			_ = os.Remove(p)
		}
		w, err := startWarm(localEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.in.WriteString(warmPrelude("w.1", att, "")); err != nil {
			t.Fatal(err)
		}
		if l, err := w.ans.ReadString('\n'); err != nil || l != "L\n" {
			t.Fatalf("answer %q %v", l, err)
		}
		w.af.Close()
		_, _ = w.in.WriteString(rest[:cut])
		w.in.Close() // the worker died here
		_ = w.cmd.Wait()
		if _, err := os.Stat(ran); err != nil {
			continue // nothing ran
		}
		run, _ := os.ReadFile(att + ".run")
		if n := strings.Split(strings.TrimSpace(string(run)), "\n"); len(n) != 2 {
			t.Errorf("cut before %q: the command ran, and the run file is %q", rest[cut:], run)
		}
	}
}

// A warm shell that dies after it answered, before the worker took the
// lock on its descriptor, is let go and reaped (no zombie is left in the
// worker); nothing of the attempt had started, and it runs the cold way.
func TestWarmShellDeadAfterAnswerIsReaped(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	dir := t.TempDir()
	base := filepath.Join(dir, "attempts")
	if err := os.MkdirAll(filepath.Join(dir, "locks"), 0o700); err != nil {
		t.Fatal(err)
	}
	shell := 0
	pidfdGetfd = func(pidfd, _, _ int) (int, error) { // the shell is killed here, and has ended
		fdinfo, _ := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
		for l := range strings.SplitSeq(string(fdinfo), "\n") {
			if v, ok := strings.CutPrefix(l, "Pid:"); ok {
				shell, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED|unix.WNOWAIT, nil)
		return -1, syscall.EPERM
	}
	defer func() { pidfdGetfd = unix.PidfdGetfd; l.pre.warm.noPidfd.Store(false) }()
	warmPids(t, l)
	res, err := l.Run(context.Background(), hostexec.Command{Attempt: "w.1.create.f.n.1.run", Lock: "c.f.n",
		Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: `echo ran`})
	if err != nil || res.Stdout != "ran\n" || shell == 0 {
		t.Fatalf("%+v %v (shell %d), want it run the cold way", res, err, shell)
	}
	for range 200 {
		if _, err := os.Stat("/proc/" + strconv.Itoa(shell)); err != nil {
			return // reaped
		}
		time.Sleep(10 * time.Millisecond)
	}
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(shell) + "/stat")
	t.Fatalf("the warm shell %d is left unreaped: %s", shell, stat)
}
