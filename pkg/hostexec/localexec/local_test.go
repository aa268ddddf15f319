package localexec

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/linestest"
)

// localEnvOf runs env with l and returns the environment it saw.
func localEnvOf(t *testing.T, l Local, cmd hostexec.Command) map[string]string {
	t.Helper()
	cmd.Script = "env"
	res, err := l.Run(context.Background(), cmd)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("env: %+v %v", res, err)
	}
	got := map[string]string{}
	for l := range strings.SplitSeq(strings.TrimSuffix(res.Stdout, "\n"), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	return got
}

// A local command gets PATH, HOME, LANG and USER from the worker (as its
// main read them: WorkerEnvOf), its own Env and Secrets, and nothing else
// of the worker's environment.
func TestLocalCleanEnvironment(t *testing.T) {
	t.Setenv("GANTRY_SSH_KEY", "/keys/sentinel-key-path")
	t.Setenv("NATS_CREDS", "sentinel-creds-value")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("USER", "someone")
	got := localEnvOf(t, Local{Worker: WorkerEnvOf(os.LookupEnv)}, hostexec.Command{Env: map[string]string{"MINE": "m"}, Secrets: map[string]string{"TOKEN": "t0ken-value"}})
	allowed := []string{"PATH", "HOME", "LANG", "USER", "PWD", "SHLVL", "_", "MINE", "TOKEN"}
	for k := range got {
		if !slices.Contains(allowed, k) {
			t.Errorf("%s=%s reached the command", k, got[k])
		}
	}
	for k, want := range map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"), "LANG": "C.UTF-8", "USER": "someone", "MINE": "m", "TOKEN": "***"} {
		if got[k] != want {
			t.Errorf("%s=%q, want %q", k, got[k], want)
		}
	}
	for _, v := range got {
		if strings.Contains(v, "sentinel") {
			t.Errorf("a value of the worker's reached the command: %q", v)
		}
	}
}

// Without PATH and HOME the command gets a usual PATH and the user's home
// directory; LANG and USER are left out. The runner reads no environment
// of its own: the worker's variables reach a command only through
// Local.Worker.
func TestLocalEnvironmentDefaults(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"PATH": "/sentinel/bin:" + os.Getenv("PATH"), "HOME": "/sentinel-home", "LANG": "sentinel", "USER": "sentinel"} {
		t.Setenv(k, v)
	}
	got := localEnvOf(t, Local{}, hostexec.Command{})
	if got["PATH"] != defaultPath || got["HOME"] != u.HomeDir {
		t.Fatalf("PATH=%q HOME=%q, want %q and %q", got["PATH"], got["HOME"], defaultPath, u.HomeDir)
	}
	for _, k := range []string{"LANG", "USER"} {
		if v, ok := got[k]; ok {
			t.Errorf("%s=%q set though the worker has none", k, v)
		}
	}
}

// A command that exits 0 leaving a process that holds its output open
// succeeds once KillGrace has passed, saying its output was cut; it is
// not failed for what it left running.
func TestLocalCommandLeavingAProcessOnItsOutput(t *testing.T) {
	dir := t.TempDir()
	res, err := Local{}.Run(context.Background(), hostexec.Command{Script: "echo started; sleep 4 & echo $! >" + dir + "/pid; exit 0"})
	if b, rerr := os.ReadFile(dir + "/pid"); rerr == nil {
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exit %d, err %v; want 0 and no error", res.ExitCode, err)
	}
	if res.Stdout != "started\n" || !strings.HasSuffix(res.Stderr, OutputCut+"\n") {
		t.Fatalf("stdout %q, stderr %q; want the line, and the cut said", res.Stdout, res.Stderr)
	}
}

// A local durable attempt's host lock is held by its own shell while the
// command runs: the worker keeps no descriptor of the lock file (so the
// lock outlives a worker that dies), a flock from elsewhere is refused
// until the command ends, and granted after.
func TestShellHoldsTheLock(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "attempts")
	gate := filepath.Join(dir, "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) }) // ends the command if the test fails first
	started := linestest.New("running")
	done := make(chan hostexec.Result, 1)
	go func() {
		res, err := Local{}.RunAttempt(context.Background(), hostexec.Attempt{ID: "w.1.create.f.n.1.run", Lock: "c.f.n", Command: hostexec.Command{OnLine: started.On,
			Env:    map[string]string{"GANTRY_ATTEMPTS": base},
			Script: `echo running; i=0; while [ ! -e ` + gate + ` ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done`}})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	started.Wait(t, "running")
	lockFile := filepath.Join(dir, "locks", "c.f.n")
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && l == lockFile {
			t.Fatal("the worker keeps a descriptor of the lock file")
		}
	}
	f, err := os.OpenFile(lockFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock while the command runs: %v, want EWOULDBLOCK", err)
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

// A holder's name is written over the last one and cut to length: a
// shorter name leaves nothing of a longer one, and a missing file is made.
func TestWriteHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.holder")
	for _, line := range []string{"w1.1.create.f.n.1.run create.h1\n", "w2.1.f.n.1.run\n", "w3.1.create.f.n.10.run create.h1\n"} {
		if err := writeHolder(path, []byte(line)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); string(b) != line || err != nil {
			t.Fatalf("holder file %q, %v; want %q", b, err, line)
		}
	}
}
