package sshexec

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// A killed attempt ends its own processes, not those an earlier attempt
// run by the same agent left running in the background.
func TestAgentKillSparesAnEarlierAttemptsProcesses(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	env := map[string]string{"GANTRY_ATTEMPTS": dir}
	res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "d.1", Command: hostexec.Command{Script: "sleep 60 & echo $!", Env: env}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	_, err = r.RunAttempt(context.Background(), hostexec.Attempt{ID: "d.2", Command: hostexec.Command{Script: `sh -c 'trap "" TERM; exec sleep 61' & echo $! >"$GANTRY_ATTEMPTS/p2"; sleep 60`, Env: env, Timeout: 500 * time.Millisecond}})
	if err == nil {
		t.Fatal("the second attempt was not killed")
	}
	time.Sleep(200 * time.Millisecond)
	if syscall.Kill(pid, 0) != nil {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		t.Fatalf("the first attempt's background process %d was killed with the second attempt %q", pid, b)
	}
	b, err := os.ReadFile(dir + "/p2")
	p2, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || p2 <= 1 {
		t.Fatalf("p2 %q %v", b, err)
	}
	// The kill escalates (SIGTERM, then SIGKILL about 2 s later); on a
	// loaded machine its last step may end just after Run returns.
	for deadline := time.Now().Add(5 * time.Second); running(p2) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if running(p2) {
		_ = syscall.Kill(p2, syscall.SIGKILL)
		t.Fatalf("the second attempt's process %d, which ignores SIGTERM, outlived its kill", p2)
	}
	if run, _ := os.ReadFile(dir + "/d.2.run"); !strings.HasSuffix(string(run), "\n137\nkilled\n") {
		t.Fatalf("d.2.run %q, want the kill recorded (137, then killed)", run)
	}
}
