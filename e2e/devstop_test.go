package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// devProc is a `gantry dev` process a test started, in a process group
// of its own, on a fleet's key and known_hosts.
type devProc struct {
	t      *testing.T
	bin    string
	cmd    *exec.Cmd
	url    string
	seed   string // the operator's nkey seed file
	exited chan error
}

// startDev starts gantry dev with args and waits until its services answer.
func startDev(t *testing.T, bin string, fleet *sshtest.Fleet, args ...string) *devProc {
	t.Helper()
	data := t.TempDir()
	url := fmt.Sprintf("nats://127.0.0.1:%d", loopbackPort(t))
	logPath := filepath.Join(t.TempDir(), "dev.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command(bin, append([]string{"dev", "--port", strings.TrimPrefix(url, "nats://127.0.0.1:"), "--data-dir", data,
		"--ssh-key", fleet.KeyFile, "--known-hosts", fleet.KnownHosts, "--ssh-agent=false"}, args...)...)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &devProc{t: t, bin: bin, cmd: cmd, url: url, exited: make(chan error, 1)}
	go func() { d.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-d.exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("gantry dev log:\n%s", tail(string(b), 6000))
		}
	})
	if out, err := exec.Command(bin, "ping", "--server", url, "--service", "gantry-planner", "--service", "gantry-state-store", "--service", "gantry-executor", "--wait", "30s").CombinedOutput(); err != nil {
		t.Fatalf("gantry dev did not come up: %v %s", err, out)
	}
	keys, err := busauth.LoadOrCreate(filepath.Join(data, "auth"))
	if err != nil {
		t.Fatal(err)
	}
	d.seed = keys.SeedFile(events.Operator)
	return d
}

// submit submits c with the CLI and returns the workflow id.
func (d *devProc) submit(c *dag.Composition) string {
	d.t.Helper()
	file := filepath.Join(d.t.TempDir(), "c.json")
	b, _ := json.Marshal(c)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		d.t.Fatal(err)
	}
	out, err := exec.Command(d.bin, "submit", "-q", file, "--server", d.url, "--nkey", d.seed).CombinedOutput()
	if err != nil {
		d.t.Fatalf("gantry submit: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// status is gantry status -o json (empty when it fails).
func (d *devProc) status(id string) events.WorkflowDoc {
	var doc events.WorkflowDoc
	out, err := exec.Command(d.bin, "status", id, "-o", "json", "--server", d.url, "--nkey", d.seed).Output()
	if err == nil {
		_ = json.Unmarshal(out, &doc)
	}
	return doc
}

// stop sends sig and says how long gantry dev took to exit, failing the
// test when it or any process of its group is still there after within.
func (d *devProc) stop(sig syscall.Signal, within time.Duration) time.Duration {
	d.t.Helper()
	start := time.Now()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		took := time.Since(start)
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			d.t.Fatal(err)
		}
		d.t.Logf("gantry dev exited %s after %s (exit code %d)", took.Round(time.Millisecond), sig, d.cmd.ProcessState.ExitCode())
		if err := syscall.Kill(-d.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			d.t.Errorf("a process of gantry dev's group is still there after it exited (kill -0: %v)", err)
		}
		d.exited <- err // for the cleanup
		return took
	case <-time.After(within):
		d.t.Fatalf("gantry dev still runs %s after %s", within, sig)
		return 0
	}
}

// SIGTERM or SIGINT stops gantry dev, and every process it started,
// within a bounded time while its nodes wait on hosts that do not answer
// or do not allow them a session: a node running on a host that froze
// (SIGSTOP; stopped once the keepalives close its connection, within
// --ssh-keepalive × 4), a node connecting to a frozen host (stopped at
// once), and nodes waiting for the one session a host allows (stopped
// once the running node ends).
func TestDevStopsWhileHostsHang(t *testing.T) {
	bin := buildGantry(t)
	t.Run("frozen mid-run", func(t *testing.T) {
		fleet := sshtest.Start(t, 1, sshtest.Options{})
		h := fleet.Hosts[0]
		d := startDev(t, bin, fleet, "--ssh-keepalive", "1s", "--ssh-connect-timeout", "2s")
		tl := newTimeline()
		defer func() { t.Logf("timeline:\n%s", tl) }()
		sleep := uniqueSleep(60)
		remote := watchRemote(t, tl, sleep)
		t.Cleanup(func() { remote.kill(t) })
		attempts := dag.Text(filepath.Join(h.Dir, "attempts")) // the host's own
		id := d.submit(&dag.Composition{Name: "frozen", Hosts: map[string]dag.Host{"h": {Address: h.Addr, User: fleet.User}},
			Formulas: []dag.Formula{{ID: "f", Server: "h", Nodes: []dag.Node{{Name: "n", Run: sleep, Env: map[string]dag.EnvValue{"GANTRY_ATTEMPTS": attempts}}}}}})
		tl.at("submitted " + id)
		d.waitFor("the node to run on the host", 30*time.Second, func() bool {
			f := d.status(id).Formulas["f"]
			return remote.running() && f != nil && f.Nodes["n"].Status == dag.NodeRunning
		})
		tl.at("gantry status: node running")
		time.Sleep(2 * time.Second) // keepalives answered
		t.Cleanup(h.Freeze())
		tl.at("host frozen (SIGSTOP)")
		took := d.stop(syscall.SIGTERM, 30*time.Second)
		tl.at(fmt.Sprintf("gantry dev exited, %.1fs after SIGTERM", took.Seconds()))
		if took > 10*time.Second {
			t.Errorf("gantry dev took %s to stop, want within the keepalives' 4s and a few seconds", took.Round(time.Millisecond))
		}
	})
	t.Run("frozen while connecting", func(t *testing.T) {
		fleet := sshtest.Start(t, 1, sshtest.Options{})
		h := fleet.Hosts[0]
		d := startDev(t, bin, fleet, "--ssh-connect-timeout", "1m")
		t.Cleanup(h.Freeze())
		tl := newTimeline()
		defer func() { t.Logf("timeline:\n%s", tl) }()
		id := d.submit(&dag.Composition{Name: "connecting", Hosts: map[string]dag.Host{"h": {Address: h.Addr, User: fleet.User}},
			Formulas: []dag.Formula{{ID: "f", Server: "h", Nodes: []dag.Node{{Name: "n", Run: "true"}}}}})
		tl.at("submitted " + id + " (host frozen before)")
		d.waitFor("the formula to run", 30*time.Second, func() bool {
			f := d.status(id).Formulas["f"]
			return f != nil && f.Status == dag.FormulaRunning
		})
		tl.at("gantry status: formula running (connecting)")
		time.Sleep(time.Second)
		took := d.stop(syscall.SIGINT, 30*time.Second)
		tl.at(fmt.Sprintf("gantry dev exited, %.1fs after SIGINT", took.Seconds()))
		if took > 5*time.Second {
			t.Errorf("gantry dev took %s to stop: it waited for the connection's set-up", took.Round(time.Millisecond))
		}
	})
	t.Run("MaxSessions 1", func(t *testing.T) {
		fleet := sshtest.Start(t, 1, sshtest.Options{HostConfig: map[int][]string{0: {"MaxSessions 1"}}})
		d := startDev(t, bin, fleet)
		tl := newTimeline()
		defer func() { t.Logf("timeline:\n%s", tl) }()
		dir := t.TempDir()
		id := d.submit(eightNodes(fleet, dir, "3"))
		tl.at("submitted " + id + " (8 nodes of sleep 3, MaxSessions 1)")
		d.waitFor("a node to start", 30*time.Second, func() bool { return len(commandStarts(t, dir)) > 0 })
		tl.at("first command started")
		time.Sleep(time.Second) // the others wait for the session
		took := d.stop(syscall.SIGTERM, 30*time.Second)
		tl.at(fmt.Sprintf("gantry dev exited, %.1fs after SIGTERM", took.Seconds()))
		if took > 8*time.Second {
			t.Errorf("gantry dev took %s to stop, want the running node's end (3s) and a few seconds", took.Round(time.Millisecond))
		}
		if n := len(commandStarts(t, dir)); n != 1 {
			t.Errorf("%d commands started, want the one running at the SIGTERM", n)
		}
	})
}

// kill ends the remote command, which the test started through its sshd
// (SIGKILL to each process with its unique command line, by pid): a
// frozen host's command would otherwise outlive the test.
func (r *remote) kill(t *testing.T) {
	out, _ := exec.Command("pgrep", "-f", r.pattern).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Logf("kill %d: %v", pid, err)
			}
		}
	}
}

// waitFor polls cond every 100 ms until it holds, failing the test
// after timeout.
func (d *devProc) waitFor(what string, timeout time.Duration, cond func() bool) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			d.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
