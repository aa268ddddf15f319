package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// Cancel reaches the host whatever happens to the executor: a node's
// command outlives its executor (its attempt is durable on the host), so
// a cancel that comes while no executor follows it must still kill it
// (or find that it ended), and its node must end as it did on the host.
// The executor here is an OS process of its own, killed with SIGKILL and
// started again; NATS (with auth), the other services and sshd are real.
// The host is in a zone of its own, so its work goes only to that
// executor: the stack's own (in-process, no zone) takes none of it.

const farZone = "far"

// executorProc is an executor process (services/executor) serving farZone.
type executorProc struct {
	t   *testing.T
	bin string
	env []string
	log string
	mu  sync.Mutex
	cmd *exec.Cmd
	out *os.File
}

// buildExecutor is the executor binary: $GANTRY_BIN/executor when set
// (make services), else built from this tree.
func buildExecutor(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("GANTRY_BIN"); dir != "" {
		return filepath.Join(dir, "executor")
	}
	bin := filepath.Join(t.TempDir(), "executor")
	if out, err := exec.Command("go", "build", "-o", bin, "../services/executor").CombinedOutput(); err != nil {
		t.Fatalf("build executor: %v\n%s", err, out)
	}
	return bin
}

// startExecutor starts an executor process for s's fleet, with env more
// in its environment; it is killed when the test ends.
func startExecutor(t *testing.T, s *stack, env ...string) *executorProc {
	t.Helper()
	x := &executorProc{t: t, bin: buildExecutor(t), log: filepath.Join(t.TempDir(), "executor.log"),
		env: append([]string{"NATS_URL=" + s.ns.URL(), "NATS_NKEY=" + s.ns.Keys.SeedFile(events.Executor),
			"GANTRY_SSH_KEY=" + s.fleet.KeyFile, "GANTRY_KNOWN_HOSTS=" + s.fleet.KnownHosts, "GANTRY_EXECUTOR_LABELS=zone=" + farZone}, env...)}
	t.Cleanup(func() {
		x.kill9()
		if t.Failed() {
			b, _ := os.ReadFile(x.log)
			t.Logf("executor process log:\n%s", tail(string(b), 6000))
		}
	})
	x.start()
	return x
}

// start starts the process and returns once it consumes its work.
func (x *executorProc) start() {
	x.t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	before, _ := os.ReadFile(x.log)
	out, err := os.OpenFile(x.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		x.t.Fatal(err)
	}
	cmd := exec.Command(x.bin)
	cmd.Env = append(os.Environ(), x.env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		x.t.Fatalf("start executor: %v", err)
	}
	x.cmd, x.out = cmd, out
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(x.log)
		if strings.Contains(string(b[len(before):]), `"executor started"`) {
			return
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("the executor process did not start:\n%s", tail(string(b), 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill9 kills the process with SIGKILL and waits for it to be gone.
func (x *executorProc) kill9() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cmd == nil {
		return
	}
	_ = x.cmd.Process.Kill()
	_ = x.cmd.Wait()
	x.out.Close()
	x.cmd = nil
}

// timeline notes when things happened, in seconds from its start.
type timeline struct {
	t0    time.Time
	mu    sync.Mutex
	lines []string
}

func newTimeline() *timeline { return &timeline{t0: time.Now()} }

func (tl *timeline) at(what string) time.Duration {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	d := time.Since(tl.t0)
	tl.lines = append(tl.lines, fmt.Sprintf("%6.1fs  %s", d.Seconds(), what))
	return d
}

func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.lines, "\n")
}

// remote follows a command on the host by its unique command line
// ("sleep 45.123456789"; read with pgrep, never signalled from here):
// gone is closed once it has run and is no longer there.
type remote struct {
	pattern string
	seen    chan struct{}
	gone    chan struct{}
}

func watchRemote(t *testing.T, tl *timeline, cmdline string) *remote {
	r := &remote{pattern: "^" + strings.ReplaceAll(cmdline, ".", `\.`) + "$", seen: make(chan struct{}), gone: make(chan struct{})}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		running := false
		for {
			out, _ := exec.Command("pgrep", "-f", r.pattern).Output()
			now := strings.TrimSpace(string(out)) != ""
			switch {
			case now && !running:
				tl.at("remote `" + cmdline + "` running (pid " + strings.Fields(string(out))[0] + ")")
				close(r.seen)
			case !now && running:
				tl.at("remote `" + cmdline + "` gone")
				close(r.gone)
				return
			}
			running = now
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return r
}

func (r *remote) running() bool {
	select {
	case <-r.gone:
		return false
	default:
	}
	select {
	case <-r.seen:
		return true
	default:
		return false
	}
}

// watchStatus notes in tl each change, in gantry status (state.workflow),
// of the workflow's state and of its nodes' states.
func (s *stack) watchStatus(tl *timeline, id string) {
	stop := make(chan struct{})
	s.t.Cleanup(func() { close(stop) })
	go func() {
		seen := map[string]string{}
		note := func(what, now string) {
			if seen[what] != now {
				seen[what] = now
				tl.at("gantry status: " + what + " " + now)
			}
		}
		for {
			// Polled in the background: a long wait costs nothing, and the
			// state-store keeps its own read budget (a short one it ran out
			// of under load would have it answer every read 503 a while).
			d, err := s.cl.WithTimeout(10*time.Second).Status(context.Background(), id)
			if err == nil && d.Status != "" {
				note("workflow", fmt.Sprintf("%s (generation %d)", d.Status, d.Generation))
				for fid, f := range d.Formulas {
					for n, nd := range f.Nodes {
						note("node "+fid+"/"+n, string(nd.Status))
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// uniqueSleep is a sleep of secs seconds whose command line no other
// process has: "sleep 45.123456789".
func uniqueSleep(secs int) string {
	return fmt.Sprintf("sleep %d.%09d", secs, time.Now().UnixNano()%1e9)
}

// farComp is a composition of one formula, "work", on the fleet's first
// host in farZone; its attempts are kept in the host's own directory.
func farComp(s *stack, name string, nodes ...dag.Node) *dag.Composition {
	h := s.fleet.Hosts[0]
	for i := range nodes {
		nodes[i].Env = map[string]dag.EnvValue{"GANTRY_ATTEMPTS": dag.Text(filepath.Join(h.Dir, "attempts"))}
	}
	return &dag.Composition{Name: name, Reset: true,
		Hosts:    map[string]dag.Host{"h": {Address: h.Addr, User: s.fleet.User, Labels: map[string]string{"zone": farZone}}},
		Formulas: []dag.Formula{{ID: "work", Server: "h", Nodes: nodes}}}
}

// hostAttempt reads the host's record of the attempt of node in the
// workflow's generation gen: its supervisor's pid and its exit status
// ("" while it runs).
func (s *stack) hostAttempt(id string, gen int, node string) (pid, status string) {
	s.t.Helper()
	runs, _ := filepath.Glob(filepath.Join(s.fleet.Hosts[0].Dir, "attempts", fmt.Sprintf("%s.%d.create.work.%s.*.run.run", id, gen, node)))
	if len(runs) == 0 {
		return "", ""
	}
	b, _ := os.ReadFile(runs[len(runs)-1])
	l := strings.Split(string(b), "\n")
	if len(l) > 1 {
		status = l[1]
	}
	return l[0], status
}

// nodeState is a node's state in the workflow document (gantry status).
func (s *stack) nodeState(id, formula, node string) dag.NodeState {
	if f := s.status(id).Formulas[formula]; f != nil && f.Nodes[node] != nil {
		return f.Nodes[node].Status
	}
	return ""
}

// wantNodeEnd checks that a node ends want in gantry status (the
// workflow document), gantry state (the per-host projection) and its last
// event, within timeout.
func (s *stack) wantNodeEnd(id, workflow, node string, want dag.NodeState, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for s.nodeState(id, "work", node) != want && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := s.nodeState(id, "work", node); got != want {
		s.t.Errorf("gantry status: node %s is %q (waited %s after the workflow ended), want %s", node, got, timeout, want)
	}
	s.wantHostDoc("h", workflow, "work", node, map[string]any{"status": want, "workflow_id": id})
	last := ""
	for _, e := range s.events(id) {
		if e.typ.Family() == events.FamilyNode && e.formula == "work" && e.node == node {
			last = e.status
		}
	}
	if last != string(want) {
		s.t.Errorf("events: the last event of node %s is %q, want %s", node, last, want)
	}
}

// killedRun runs a node that sleeps 45 s, kills the executor with SIGKILL
// while it runs, and cancels the workflow, in the order given by
// restartFirst: cancel while the executor is down, then start it again;
// or start it again, then cancel. The remote command must be gone within
// seconds of the cancel and of the restart, its node cancelled in status,
// state and events, and a retry must not run again the node that
// succeeded before it.
func killedRun(t *testing.T, restartFirst bool) {
	s := newStack(t, stackOptions{hosts: 1})
	x := startExecutor(t, s)
	h := s.fleet.Hosts[0]
	mk := filepath.Join(h.Dir, "markers")
	sleep := uniqueSleep(45)
	name := "restart"
	c := farComp(s, name,
		dag.Node{Name: "first", Run: "echo first >> " + mk},
		dag.Node{Name: "wait", DependsOn: []string{"first"}, Run: "echo wait >> " + mk + "; " + sleep})
	tl := newTimeline()
	defer func() { t.Logf("timeline:\n%s", tl) }()
	id := s.mustSubmit(c)
	tl.at("submitted " + id)
	s.watchStatus(tl, id)
	r := watchRemote(t, tl, sleep)
	s.waitFor("the node to run", 20*time.Second, func() bool { return r.running() && s.nodeState(id, "work", "wait") == dag.NodeRunning })
	x.kill9()
	killed := tl.at("executor killed (SIGKILL)")
	cancel := func() time.Duration {
		body, code := s.control(id, events.VerbCancel)
		if code != "" {
			t.Fatalf("cancel: %s %s", code, body)
		}
		return tl.at("cancel answered: " + strings.TrimSpace(body))
	}
	var cancelled, restarted time.Duration
	if restartFirst {
		x.start()
		restarted = tl.at("executor started again")
		cancelled = cancel()
	} else {
		cancelled = cancel()
		time.Sleep(2 * time.Second)
		if !r.running() {
			t.Fatal("the remote command ended while no executor ran (nothing could have killed it)")
		}
		x.start()
		restarted = tl.at("executor started again")
	}
	// A dispatch whose executor died is delivered again once its ack wait
	// (10 s) has passed since its last progress: the executor started
	// again kills the command then.
	select {
	case <-r.gone:
		tl.at("remote command gone")
	case <-time.After(20 * time.Second):
		t.Errorf("the remote command still runs %.0fs after the cancel (killed at %.1fs, cancelled at %.1fs, restarted at %.1fs)",
			(tl.at("still running") - cancelled).Seconds(), killed.Seconds(), cancelled.Seconds(), restarted.Seconds())
	}
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowCancelled {
		t.Fatalf("workflow %s", d.Status)
	}
	tl.at("workflow ended cancelled")
	s.wantNodeEnd(id, name, "wait", dag.NodeCancelled, 15*time.Second)
	s.wantNodeEnd(id, name, "first", dag.NodeSucceeded, time.Second)
	if pid, status := s.hostAttempt(id, 1, "wait"); status != "143" && status != "137" {
		t.Errorf("the host's record of the attempt (supervisor %s): exit status %q, want the kill's (143 or 137)", pid, status)
	}
	// The retry runs again what was cancelled, not what succeeded.
	if body, code := s.control(id, events.VerbRetry); code != "" {
		t.Fatalf("retry: %s %s", code, body)
	}
	tl.at("retried")
	again := watchRemote(t, tl, sleep)
	s.waitFor("the retried node to run", 20*time.Second, func() bool { return again.running() })
	if body, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel of the retry: %s %s", code, body)
	}
	if d := s.waitGen(id, 2, 30*time.Second); d.Status != dag.WorkflowCancelled {
		t.Fatalf("retry: workflow %s", d.Status)
	}
	tl.at("retry cancelled")
	if m := markers(t, h); m["first"] != 1 || m["wait"] != 2 {
		t.Errorf("the host ran first %d time(s) and wait %d, want 1 and 2", m["first"], m["wait"])
	}
}

// Cancel while the executor is down, then start it again: the command it
// left running on the host is killed as soon as the executor sees its
// work again.
func TestCancelWhileExecutorDownKillsOnRestart(t *testing.T) { killedRun(t, false) }

// Start the executor again, then cancel before the work is delivered to
// it again: the same.
func TestCancelAfterExecutorRestartKills(t *testing.T) { killedRun(t, true) }

// A node that ends on its host while its executor is down ends as it did
// there, even if the workflow was cancelled meanwhile: its success is
// recorded and published, and a retry does not run it again.
func TestNodeThatEndedWhileExecutorDownKeepsItsSuccess(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	x := startExecutor(t, s)
	h := s.fleet.Hosts[0]
	m := filepath.Join(h.Dir, "markers")
	name := "ended"
	c := farComp(s, name,
		dag.Node{Name: "quick", Run: "echo quick >> " + m + "; sleep 3"},
		dag.Node{Name: "next", DependsOn: []string{"quick"}, Run: "echo next >> " + m})
	tl := newTimeline()
	defer func() { t.Logf("timeline:\n%s", tl) }()
	id := s.mustSubmit(c)
	tl.at("submitted " + id)
	s.watchStatus(tl, id)
	s.waitFor("the node to run", 20*time.Second, func() bool { return s.nodeState(id, "work", "quick") == dag.NodeRunning })
	x.kill9()
	tl.at("executor killed (SIGKILL)")
	if body, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel: %s %s", code, body)
	}
	tl.at("cancel answered")
	s.waitFor("the node to end on its host", 10*time.Second, func() bool { _, st := s.hostAttempt(id, 1, "quick"); return st != "" })
	if _, st := s.hostAttempt(id, 1, "quick"); st != "0" {
		t.Fatalf("the host's record of quick: exit status %q, want 0", st)
	}
	tl.at("host: quick ended, exit status 0")
	x.start()
	tl.at("executor started again")
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowCancelled {
		t.Fatalf("workflow %s", d.Status)
	}
	s.wantNodeEnd(id, name, "quick", dag.NodeSucceeded, 15*time.Second)
	s.wantNodeEnd(id, name, "next", dag.NodeCancelled, time.Second)
	if body, code := s.control(id, events.VerbRetry); code != "" {
		t.Fatalf("retry: %s %s", code, body)
	}
	if d := s.waitGen(id, 2, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Errorf("retry: workflow %s", d.Status)
	}
	tl.at("retry ended")
	if got := markers(t, h); got["quick"] != 1 || got["next"] != 1 {
		t.Errorf("the host ran quick %d time(s) and next %d, want each once", got["quick"], got["next"])
	}
}

// A cancel whose running formula never reports (its executor is gone)
// ends the workflow cancelled after the planner's wait, 30 s by default;
// the executor that comes back later still kills the command on its host
// and ends its node cancelled.
func TestCancelWithTheExecutorGoneEndsAfterTheWait(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	x := startExecutor(t, s)
	sleep := uniqueSleep(120)
	name := "gone"
	c := farComp(s, name, dag.Node{Name: "wait", Run: sleep})
	tl := newTimeline()
	defer func() { t.Logf("timeline:\n%s", tl) }()
	id := s.mustSubmit(c)
	tl.at("submitted " + id)
	s.watchStatus(tl, id)
	r := watchRemote(t, tl, sleep)
	s.waitFor("the node to run", 20*time.Second, func() bool { return r.running() && s.nodeState(id, "work", "wait") == dag.NodeRunning })
	x.kill9()
	tl.at("executor killed (SIGKILL)")
	if body, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel: %s %s", code, body)
	}
	cancelled := tl.at("cancel answered")
	d := s.wait(id, 45*time.Second)
	ended := tl.at("workflow ended " + string(d.Status))
	if d.Status != dag.WorkflowCancelled {
		t.Fatalf("workflow %s", d.Status)
	}
	if waited := ended - cancelled; waited < 29*time.Second || waited > 35*time.Second {
		t.Errorf("the workflow ended %.1fs after the cancel, want after the planner's wait of 30s", waited.Seconds())
	}
	if f := d.Formulas["work"]; f == nil || f.Status != dag.FormulaCancelled || !strings.Contains(f.Error, "no outcome from its executor within 30s") {
		t.Errorf("formula work: %+v", f)
	}
	if !r.running() {
		t.Fatal("the remote command ended with no executor to kill it")
	}
	x.start()
	tl.at("executor started again")
	select {
	case <-r.gone:
	case <-time.After(20 * time.Second):
		t.Errorf("the remote command still runs 20s after the executor came back")
	}
	s.wantNodeEnd(id, name, "wait", dag.NodeCancelled, 15*time.Second)
	if pid, status := s.hostAttempt(id, 1, "wait"); status != "143" && status != "137" {
		t.Errorf("the host's record of the attempt (supervisor %s): exit status %q, want the kill's (143 or 137)", pid, status)
	}
}

// loopbackPort is a TCP port free on 127.0.0.1 now.
func loopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The same as TestCancelAfterExecutorRestartKills with the whole gantry
// dev (embedded NATS and the four services in one process) killed with
// SIGKILL and started again on the same data, through the gantry CLI.
func TestCancelAfterDevRestartKills(t *testing.T) {
	fleet := sshtest.Start(t, 1, sshtest.Options{})
	h := fleet.Hosts[0]
	bin := buildGantry(t)
	data, runtime := t.TempDir(), t.TempDir()
	url := fmt.Sprintf("nats://127.0.0.1:%d", loopbackPort(t))
	logPath := filepath.Join(t.TempDir(), "dev.log")
	var dev *exec.Cmd
	start := func() {
		t.Helper()
		lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		dev = exec.Command(bin, "dev", "--port", strings.TrimPrefix(url, "nats://127.0.0.1:"), "--data-dir", data,
			"--ssh-key", fleet.KeyFile, "--known-hosts", fleet.KnownHosts, "--ssh-agent=false")
		dev.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
		dev.Stdout, dev.Stderr = lf, lf
		if err := dev.Start(); err != nil {
			t.Fatal(err)
		}
		lf.Close()
		if out, err := exec.Command(bin, "ping", "--server", url, "--service", "gantry-planner", "--service", "gantry-state-store", "--service", "gantry-executor", "--wait", "30s").CombinedOutput(); err != nil {
			t.Fatalf("gantry dev did not come up: %v %s", err, out)
		}
	}
	kill := func() {
		if dev != nil {
			_ = dev.Process.Kill()
			_ = dev.Wait()
			dev = nil
		}
	}
	t.Cleanup(func() {
		kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("gantry dev log:\n%s", tail(string(b), 6000))
		}
	})
	start()
	nkey := filepath.Join(data, "auth")
	keys, err := busauth.LoadOrCreate(nkey)
	if err != nil {
		t.Fatal(err)
	}
	gantry := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append(args, "--server", url, "--nkey", keys.SeedFile(events.Operator))...).CombinedOutput()
		if err != nil {
			t.Fatalf("gantry %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	status := func(id string) events.WorkflowDoc {
		var d events.WorkflowDoc
		out, err := exec.Command(bin, "status", id, "-o", "json", "--server", url, "--nkey", keys.SeedFile(events.Operator)).Output()
		if err == nil {
			_ = json.Unmarshal(out, &d)
		}
		return d
	}
	nodeState := func(id, node string) dag.NodeState {
		if f := status(id).Formulas["work"]; f != nil && f.Nodes[node] != nil {
			return f.Nodes[node].Status
		}
		return ""
	}
	waitFor := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	markers := filepath.Join(h.Dir, "markers")
	sleep := uniqueSleep(45)
	attempts := dag.EnvValue{Text: filepath.Join(h.Dir, "attempts")}
	c := &dag.Composition{Name: "devrestart", Reset: true, Hosts: map[string]dag.Host{"h": {Address: h.Addr, User: fleet.User}},
		Formulas: []dag.Formula{{ID: "work", Server: "h", Nodes: []dag.Node{
			{Name: "first", Run: "echo first >> " + markers, Env: map[string]dag.EnvValue{"GANTRY_ATTEMPTS": attempts}},
			{Name: "wait", DependsOn: []string{"first"}, Run: "echo wait >> " + markers + "; " + sleep, Env: map[string]dag.EnvValue{"GANTRY_ATTEMPTS": attempts}},
		}}}}
	file := filepath.Join(t.TempDir(), "devrestart.json")
	b, _ := json.Marshal(c)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tl := newTimeline()
	defer func() { t.Logf("timeline:\n%s", tl) }()
	id := strings.TrimSpace(gantry("submit", "-q", file))
	tl.at("submitted " + id)
	r := watchRemote(t, tl, sleep)
	waitFor("the node to run", 30*time.Second, func() bool { return r.running() && nodeState(id, "wait") == dag.NodeRunning })
	tl.at("gantry status: node wait running")
	kill()
	tl.at("gantry dev killed (SIGKILL)")
	start()
	tl.at("gantry dev started again (ping answers)")
	gantry("cancel", id)
	tl.at("gantry cancel answered")
	select {
	case <-r.gone:
	case <-time.After(20 * time.Second):
		t.Errorf("the remote command still runs 20s after the cancel")
	}
	waitFor("the workflow to end", 30*time.Second, func() bool { return status(id).Status.Terminal() })
	tl.at("gantry status: workflow " + string(status(id).Status))
	if st := status(id).Status; st != dag.WorkflowCancelled {
		t.Fatalf("workflow %s", st)
	}
	deadline := time.Now().Add(15 * time.Second)
	for nodeState(id, "wait") != dag.NodeCancelled && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if st := nodeState(id, "wait"); st != dag.NodeCancelled {
		t.Errorf("gantry status: node wait is %q, want cancelled", st)
	} else {
		tl.at("gantry status: node wait cancelled")
	}
	var nodes []events.HostNode
	if err := json.Unmarshal([]byte(gantry("state", "-o", "json")), &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Workflow == "devrestart" && n.Node == "wait" && n.Status != dag.NodeCancelled {
			t.Errorf("gantry state: node wait is %s, want cancelled", n.Status)
		}
	}
	gantry("retry", id)
	tl.at("gantry retry answered")
	again := watchRemote(t, tl, sleep)
	waitFor("the retried node to run", 30*time.Second, func() bool { return again.running() })
	gantry("cancel", id)
	waitFor("the retry to end", 30*time.Second, func() bool { d := status(id); return d.Generation == 2 && d.Status.Terminal() })
	tl.at("retry cancelled")
	if m := readMarkers(t, markers); m["first"] != 1 || m["wait"] != 2 {
		t.Errorf("the host ran first %d time(s) and wait %d, want 1 and 2", m["first"], m["wait"])
	}
}

// readMarkers counts the lines of a marker file.
func readMarkers(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		m[l]++
	}
	return m
}
