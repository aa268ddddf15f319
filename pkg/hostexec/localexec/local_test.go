package localexec

import (
	"context"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// localEnvOf runs env locally and returns the environment it saw.
func localEnvOf(t *testing.T, cmd hostexec.Command) map[string]string {
	t.Helper()
	cmd.Script = "env"
	res, err := Local{}.Run(context.Background(), cmd)
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

// A local command gets PATH, HOME, LANG and USER from the worker, its own
// Env and Secrets, and nothing else of the worker's environment.
func TestLocalCleanEnvironment(t *testing.T) {
	t.Setenv("GANTRY_SSH_KEY", "/keys/sentinel-key-path")
	t.Setenv("NATS_CREDS", "sentinel-creds-value")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("USER", "someone")
	got := localEnvOf(t, hostexec.Command{Env: map[string]string{"MINE": "m"}, Secrets: map[string]string{"TOKEN": "t0ken-value"}})
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
// directory; LANG and USER are left out.
func TestLocalEnvironmentDefaults(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"PATH", "HOME", "LANG", "USER"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	got := localEnvOf(t, hostexec.Command{})
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
