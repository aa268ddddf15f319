package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// gantryCmd runs the CLI as identity id against the stack.
func (s *stack) gantryCmd(bin string, id events.Identity, args ...string) *exec.Cmd {
	return exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(id))...)
}

func exitOf(t *testing.T, err error) int {
	t.Helper()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// A node over SSH that prints PROGRESS: 10, 50 and 100 (and two lines that
// are not a percent) publishes three progress events, in order between its
// running and succeeded events; gantry status shows the percent while it
// runs, the workflow document keeps the last one; gantry watch prints them
// with a summary (-o json: the events as JSON lines); gantry logs prints every line, all of them plain output
// too, as an operator or a viewer, following the run with -f.
func TestProgressLogsAndWatchOverSSH(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	bin := buildGantry(t)
	h := s.fleet.Hosts[0]
	c := &dag.Composition{Name: "site", Hosts: map[string]dag.Host{"h0": {Address: h.Addr, User: s.fleet.User}},
		Formulas: []dag.Formula{{ID: "web", Server: "h0", Nodes: []dag.Node{
			{Name: "build", Run: "echo PROGRESS: 10; sleep 0.5; echo 'PROGRESS: 50'; echo 'PROGRESS: 150'; echo 'PROGRESS: abc'; sleep 2; echo PROGRESS: 100; echo built >&2"},
			{Name: "test", Run: "echo tested", DependsOn: []string{"build"}},
		}}}}
	id := s.mustSubmit(c)
	// logs -f, started now, follows the run to its end (as a viewer).
	follow := s.gantryCmd(bin, events.Viewer, "logs", "-f", id)
	var followOut syncBuffer
	follow.Stdout, follow.Stderr = &followOut, &followOut
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	followDone := make(chan error, 1)
	go func() { followDone <- follow.Wait() }()
	// status shows the running node's percent
	sawRunning := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && sawRunning == ""; time.Sleep(100 * time.Millisecond) {
		out, err := s.gantryCmd(bin, events.Viewer, "status", id).CombinedOutput()
		if err != nil {
			continue
		}
		// NODE STATUS ATTEMPTS (no EXIT yet) TOOK ("0.4s…") DETAIL
		if m := regexp.MustCompile(`(?m)^\s+build\s+running\s+1\s+\S+…\s+(\d+)%`).FindStringSubmatch(string(out)); m != nil {
			sawRunning = m[1]
		}
		if strings.Contains(string(out), "SUCCEEDED") {
			break
		}
	}
	if sawRunning != "10" && sawRunning != "50" {
		t.Errorf("gantry status never showed build running at 10%% or 50%% (saw %q)", sawRunning)
	}
	doc := s.wait(id, 30*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s", doc.Status)
	}
	if p := doc.Formulas["web"].Nodes["build"].Progress; p != 100 {
		t.Errorf("document progress %d, want 100", p)
	}
	// the events, in order
	var seq []string
	s.workflowEnvelopes(events.StreamEvents, id, func(env *events.Envelope) {
		switch env.Type.Family() {
		case events.FamilyNode:
			var e events.NodeEvent
			if events.DecodeData(env, &e) == nil && e.Node == "build" {
				seq = append(seq, string(e.Status))
			}
		case events.FamilyProgress:
			var e events.ProgressEvent
			if err := events.DecodeData(env, &e); err != nil {
				t.Errorf("progress event: %v", err)
			}
			seq = append(seq, strings.Join([]string{e.Formula, e.Node, strconv.Itoa(e.Attempt), strconv.Itoa(e.Percent)}, "/"))
		}
	})
	if want := []string{"running", "web/build/1/10", "web/build/1/50", "web/build/1/100", "succeeded"}; !slices.Equal(seq, want) {
		t.Errorf("events %q, want %q", seq, want)
	}
	// watch of the ended run: progress lines and the summary
	out, err := s.gantryCmd(bin, events.Viewer, "watch", id).CombinedOutput()
	for _, re := range []string{`web/build +10%`, `web/build +50%`, `web/build +100%`, `(?m)^-- 2/2 nodes done, 0 running, 0 failed$`} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("watch: no %q\n%s", re, out)
		}
	}
	if exitOf(t, err) != 0 {
		t.Errorf("watch: exit %v\n%s", err, out)
	}
	// watch -o json: every stdout line a CloudEvent, the summary on stderr
	jw := s.gantryCmd(bin, events.Viewer, "watch", id, "-o", "json")
	var jerr bytes.Buffer
	jw.Stderr = &jerr
	jout, err := jw.Output()
	if err != nil || !strings.Contains(jerr.String(), "-- 2/2 nodes done, 0 running, 0 failed") {
		t.Errorf("watch -o json: %v\nstderr:\n%s", err, jerr.String())
	}
	var types []string
	for _, l := range strings.Split(strings.TrimSpace(string(jout)), "\n") {
		env, err := events.Parse([]byte(l))
		if err != nil {
			t.Fatalf("watch -o json printed %q: %v", l, err)
		}
		types = append(types, string(env.Type))
	}
	if n := strings.Count(strings.Join(types, " "), "gantry.progress.update"); n != 3 || types[len(types)-1] != "gantry.workflow.succeeded" {
		t.Errorf("watch -o json: %d progress events in %q", n, types)
	}
	select {
	case err := <-followDone:
		if code := exitOf(t, err); code != 0 {
			t.Errorf("logs -f: exit %d\n%s", code, followOut.String())
		}
	case <-time.After(30 * time.Second):
		follow.Process.Kill()
		t.Fatalf("logs -f did not end with the workflow:\n%s", followOut.String())
	}
	want := []string{`web/build +stdout PROGRESS: 10$`, `web/build +stdout PROGRESS: 150$`, `web/build +stdout PROGRESS: abc$`,
		`web/build +stderr built$`, `web/test +stdout tested$`}
	for name, got := range map[string]string{"logs -f": followOut.String(), "logs": mustRun(t, s.gantryCmd(bin, events.Operator, "logs", id))} {
		for _, re := range want {
			if !regexp.MustCompile(`(?m)` + h0Host(re)).MatchString(got) {
				t.Errorf("%s: no %q\n%s", name, re, got)
			}
		}
		if n := strings.Count(got, "\n"); n != 7 {
			t.Errorf("%s: %d lines, want 7\n%s", name, n, got)
		}
	}
	t.Logf("gantry logs -f:\n%s", followOut.String())
	t.Logf("gantry watch:\n%s", out)
	// one node, as JSON
	js := mustRun(t, s.gantryCmd(bin, events.Viewer, "logs", id[:13], "web/test", "-o", "json"))
	var ll events.LogLine
	if err := json.Unmarshal([]byte(js), &ll); err != nil || ll.Line != "tested" || ll.Stream != events.Stdout || ll.Formula != "web" || ll.Node != "test" || ll.WorkflowID != id {
		t.Errorf("logs -o json: %v\n%s", err, js)
	}
	// a node or workflow that is not there
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", id, "web/nope"}, "workflow " + id + " has no node web/nope (its nodes: web/build, web/test)"},
		{[]string{"logs", "01a2000f-0000-7000-8000-000000000000"}, "no workflow 01a2000f"},
		{[]string{"logs", id, "db"}, "has no formula or host db"},
		{[]string{"logs", id, "Web"}, `"Web" is not FORMULA, FORMULA/NODE or a host name`},
	} {
		out, err := s.gantryCmd(bin, events.Viewer, c.args...).CombinedOutput()
		if code := exitOf(t, err); code == 0 || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: exit %d, want %q\n%s", c.args, code, c.want, out)
		}
	}
}

// h0Host prefixes a line pattern with the host column.
func h0Host(re string) string { return `h0 +` + re }

func mustRun(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	return string(out)
}

// syncBuffer is a buffer a command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Ctrl-C stops gantry watch, not the workflow: it says how to follow or
// cancel it and exits 130.
func TestWatchInterrupted(t *testing.T) {
	s := newStack(t, stackOptions{})
	bin := buildGantry(t)
	id := s.mustSubmit(&dag.Composition{Name: "slow", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "a", Server: "me", Nodes: []dag.Node{{Name: "n", Run: "sleep 30"}}}}})
	t.Cleanup(func() { s.gantryCmd(bin, events.Operator, "cancel", id).Run() })
	watch := s.gantryCmd(bin, events.Viewer, "watch", id)
	var out, errOut syncBuffer
	watch.Stdout, watch.Stderr = &out, &errOut
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "a/n") && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	watch.Process.Signal(syscall.SIGINT)
	code := exitOf(t, watch.Wait())
	note := "workflow " + id + " keeps running; gantry watch " + id + " to follow it again, gantry cancel " + id + " to stop it"
	if code != 130 || !strings.Contains(errOut.String(), note) || !strings.Contains(out.String(), "-- 0/1 nodes done, 1 running, 0 failed") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	if doc := s.status(id); doc.Status != dag.WorkflowRunning {
		t.Fatalf("the workflow is %s after the watch stopped", doc.Status)
	}
}
