package sshexec

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/linestest"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// runPid is the process group an attempt's run file records.
func runPid(t *testing.T, dir, attempt string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, attempt+".run"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _, _ := strings.Cut(string(b), "\n")
	return pid
}

// Durable attempts on one connection run one after another in one host
// agent (the same process group on the host), with their output and exit
// status exact, whatever the output's shape; the agent's own variables
// (the request's nonce) are not visible to the command.
func TestAgentRunsAttemptsInOneSession(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	big := strings.Repeat(strings.Repeat("x", 39)+"\n", 2000)
	cases := []struct {
		script, stdout, stderr string
		exit                   int
	}{
		{"true", "", "", 0},
		{"printf 'no newline'", "no newline\n", "", 0},
		{"echo a; echo; echo", "a\n\n\n", "", 0},
		{"printf '\\n'; exit 3", "\n", "", 3},
		{"echo out; echo err >&2; printf e2 >&2; exit 9", "out\n", "err\ne2\n", 9},
		{"i=0; while [ $i -lt 2000 ]; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done", "BIG", "", 0},
		{"set | grep -c '^_g[zqh]=' || true", "0\n", "", 0},
		{"exit 4", "", "", 4},
	}
	var pids []string
	for i, c := range cases {
		id := fmt.Sprintf("w.1.f.n%d.1", i)
		var mu sync.Mutex
		var got []string
		res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: id, Lock: "w.f.n", Command: hostexec.Command{Script: c.script, Env: map[string]string{"GANTRY_ATTEMPTS": dir},
			OnLine: func(s hostexec.Stream, l string) { mu.Lock(); got = append(got, string(s)+":"+l); mu.Unlock() }}})
		if c.stdout == "BIG" { // more than the tail: every line handed on
			var all strings.Builder
			for _, l := range got {
				all.WriteString(strings.TrimPrefix(l, "stdout:") + "\n")
			}
			if all.String() != big || err != nil || res.ExitCode != 0 {
				t.Fatalf("%d bytes of output came as %d bytes: %v", len(big), all.Len(), err)
			}
			pids = append(pids, runPid(t, dir, id))
			continue
		}
		if err != nil || res.ExitCode != c.exit || res.Stdout != c.stdout || res.Stderr != c.stderr {
			t.Fatalf("%q: %+v %v, want stdout %q stderr %q exit %d", c.script, res, err, c.stdout, c.stderr, c.exit)
		}
		if c.script == "echo a; echo; echo" && strings.Join(got, ",") != "stdout:a,stdout:,stdout:" {
			t.Fatalf("lines %q", got)
		}
		pids = append(pids, runPid(t, dir, id))
	}
	for _, p := range pids {
		if p != pids[0] {
			t.Fatalf("attempts ran in process groups %v, want one agent", pids)
		}
	}
}

// An attempt that runs longer than followAfter has its output streamed
// while it runs, not only at its end.
func TestAgentFollowsALongAttemptLive(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	firstAt := make(chan time.Time, 1)
	var mu sync.Mutex
	var got []string
	start := time.Now()
	res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w.1.f.n.1", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir},
		Script: "echo first; echo soon >&2; sleep 1.5; echo last",
		OnLine: func(s hostexec.Stream, l string) {
			mu.Lock()
			got = append(got, string(s)+":"+l)
			mu.Unlock()
			if l == "first" {
				firstAt <- time.Now()
			}
		}}})
	ended := time.Now()
	if err != nil || res.ExitCode != 0 || res.Stdout != "first\nlast\n" || res.Stderr != "soon\n" {
		t.Fatalf("%+v %v", res, err)
	}
	first := <-firstAt
	if ended.Sub(first) < time.Second {
		t.Fatalf("the first line came %v after the start and %v before the end: not while it ran", first.Sub(start), ended.Sub(first))
	}
	// From its first line the attempt runs 1.5 s more; the end is seen
	// soon after that, not a poll of the follower later. (Counted from the
	// first line, not the start: dialing and starting the host's agent
	// take what the machine's load makes them.)
	if ended.Sub(first) > 2500*time.Millisecond {
		t.Fatalf("the attempt ended %v after its first line, 1.5 s before its last: following it held it up", ended.Sub(first))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("lines %q, want each once", got)
	}
}

// Idle agents give their session slots up to plain sessions: with two
// slots, two agents left idle do not keep a plain command out.
func TestAgentSlotsGoToPlainSessions(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User, MaxSessions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := p.Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: fmt.Sprintf("w.1.f.n%d.1", i), Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, Script: "sleep 0.3"}})
			if err != nil || res.ExitCode != 0 {
				t.Errorf("%+v %v", res, err)
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 3 {
		res, err := r.Run(ctx, hostexec.Command{Script: "echo plain"})
		if err != nil || res.Stdout != "plain\n" {
			t.Fatalf("plain command %d beside idle agents: %+v %v", i, res, err)
		}
	}
	res, err := r.RunAttempt(ctx, hostexec.Attempt{ID: "w.1.f.n9.1", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, Script: "echo again"}})
	if err != nil || res.Stdout != "again\n" {
		t.Fatalf("durable after plain: %+v %v", res, err)
	}
}

// Another worker that re-attaches to an attempt running in an agent whose
// connection is alive returns as the attempt ends, not when the agent
// does (it goes on serving its connection); the command runs once.
func TestAgentAttemptReattachedFromElsewhere(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	a := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	b := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	l := linestest.New("line1")
	type ran struct {
		res hostexec.Result
		err error
		at  time.Time
	}
	first := make(chan ran, 1)
	go func() {
		res, err := a.RunAttempt(context.Background(), durable(dir, "w1.1.f.n.1", l.On))
		first <- ran{res, err, time.Now()}
	}()
	l.Wait(t, "line1")
	res, err := b.RunAttempt(context.Background(), durable(dir, "w1.1.f.n.1", nil))
	at := time.Now()
	fr := <-first
	if fr.err != nil || fr.res.ExitCode != 7 || err != nil || res.ExitCode != 7 || !strings.Contains(res.Stdout, "line1\nline2\n") {
		t.Fatalf("first %+v %v; re-attached %+v %v", fr.res, fr.err, res, err)
	}
	if d := at.Sub(fr.at); d > time.Second || d < -time.Second {
		t.Fatalf("the re-attach returned %v after the attempt's own run", d)
	}
	if c := counted(t, dir); c != "start end" {
		t.Fatalf("the host saw %q", c)
	}
	pid := runPid(t, dir, "w1.1.f.n.1")
	if _, err := os.Stat("/proc/" + pid); err != nil {
		t.Fatalf("the agent %s is gone: %v", pid, err)
	}
}

// A killed attempt ends its agent with it; the next attempt gets a new one.
func TestAgentReplacedAfterAKill(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	env := map[string]string{"GANTRY_ATTEMPTS": dir}
	if _, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w.1.f.a.1", Command: hostexec.Command{Env: env, Script: "true"}}); err != nil {
		t.Fatal(err)
	}
	_, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w.1.f.b.1", Command: hostexec.Command{Env: env, Script: "sleep 30", Timeout: 300 * time.Millisecond}})
	if err == nil {
		t.Fatal("a 30 s command with a 300 ms timeout succeeded")
	}
	res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w.1.f.c.1", Command: hostexec.Command{Env: env, Script: "echo after"}})
	if err != nil || res.Stdout != "after\n" {
		t.Fatalf("after the kill: %+v %v", res, err)
	}
	if killed, next := runPid(t, dir, "w.1.f.b.1"), runPid(t, dir, "w.1.f.c.1"); killed != runPid(t, dir, "w.1.f.a.1") || next == killed {
		t.Fatalf("agents: first %s, killed %s, next %s", runPid(t, dir, "w.1.f.a.1"), killed, next)
	}
}

// What the agent sends at an attempt's end is read up to its sentinel,
// exactly: the newline the agent writes before the sentinel is not output.
func TestReadUntilSentinel(t *testing.T) {
	for _, content := range []string{"", "a", "a\n", "a\n\n", "\n", "x y z\nlast", strings.Repeat("q", 100000)} {
		r := bufio.NewReader(strings.NewReader(content + "\nN0NCE 42\nafter"))
		var got strings.Builder
		code, err := readUntil(r, "N0NCE ", func() io.Writer { return &got })
		if err != nil || code != 42 || got.String() != content {
			t.Fatalf("content %.20q: got %.20q code %d err %v", content, got.String(), code, err)
		}
		if rest, _ := r.ReadString('\n'); rest != "after" {
			t.Fatalf("read past the sentinel: left %q", rest)
		}
	}
	// cut short: the connection ended
	if _, err := readUntil(bufio.NewReader(strings.NewReader("partial")), "N0NCE ", func() io.Writer { return io.Discard }); err == nil {
		t.Fatal("no sentinel, no error")
	}
}

// A follow session's marker line is taken off its stream, however the
// stream is cut into writes.
func TestMarkedOut(t *testing.T) {
	for _, chunks := range [][]string{{followMarker + "\nabc\n"}, {"__gan", "try_follow", "\n", "abc\n"}, {"abc\n"}, {"__gantry_x\n"}} {
		var got strings.Builder
		seen := false
		m := &markedOut{marker: followMarker + "\n", dst: &got, seen: func() { seen = true }}
		for _, c := range chunks {
			if _, err := m.Write([]byte(c)); err != nil {
				t.Fatal(err)
			}
		}
		all := strings.Join(chunks, "")
		want, marked := strings.CutPrefix(all, followMarker+"\n")
		if got.String() != want || seen != marked {
			t.Fatalf("%q: got %q seen %v", chunks, got.String(), seen)
		}
	}
}
