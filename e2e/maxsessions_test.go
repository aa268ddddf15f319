package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// eightNodes is a composition of one formula of 8 nodes that may all run
// at once (max_parallel 8) on the fleet's one host; each writes the time
// its command started to start-<node> in dir, then sleeps for sleep.
func eightNodes(f *sshtest.Fleet, dir, sleep string) *dag.Composition {
	fm := dag.Formula{ID: "f", Server: "h", MaxParallel: 8}
	for i := range 8 {
		fm.Nodes = append(fm.Nodes, dag.Node{Name: fmt.Sprintf("n%d", i), DependsOn: []string{},
			Run: fmt.Sprintf("date +%%s.%%N > %s/start-n%d; sleep %s", dir, i, sleep)})
	}
	return &dag.Composition{Name: "sessions", Hosts: map[string]dag.Host{"h": {Transport: dag.TransportSSH, Address: f.Hosts[0].Addr, User: f.User, MaxParallel: 8}},
		Formulas: []dag.Formula{fm}}
}

// commandStarts reads when each node's command started on the host.
func commandStarts(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	files, _ := filepath.Glob(filepath.Join(dir, "start-*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.TrimSpace(string(b))
		if text == "" { // being written: started, its time not there yet
			out[strings.TrimPrefix(filepath.Base(f), "start-")] = time.Time{}
			continue
		}
		sec, err := strconv.ParseFloat(text, 64)
		if err != nil {
			t.Fatalf("%s: %q", f, b)
		}
		out[strings.TrimPrefix(filepath.Base(f), "start-")] = time.Unix(0, int64(sec*1e9))
	}
	return out
}

// A host whose sshd allows 1 session per connection (MaxSessions 1, under
// the executor's --ssh-max-sessions 8) and 8 nodes that may run at once:
// the workflow ends, succeeded, each node run once as the host allows it,
// and no node is announced running before its command started (none
// while it waited for a session).
func TestHostWithMaxSessionsOneRunsEveryNode(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1, perHost: 8, ssh: sshtest.Options{HostConfig: map[int][]string{0: {"MaxSessions 1"}}}})
	dir := t.TempDir()
	tl := newTimeline()
	defer func() { t.Logf("timeline:\n%s", tl) }()
	id := s.mustSubmit(eightNodes(s.fleet, dir, "1"))
	tl.at("submitted " + id + " (8 nodes of sleep 1 at once, sshd MaxSessions 1)")
	s.watchStatus(tl, id)
	doc := s.wait(id, 90*time.Second)
	tl.at("gantry status: workflow " + string(doc.Status))
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s: %+v", doc.Status, doc.Formulas["f"])
	}
	starts := commandStarts(t, dir)
	announced := map[string]time.Time{}
	for _, e := range s.events(id) {
		if e.typ.Family() != events.FamilyNode || e.status != string(dag.NodeRunning) || e.reason != "" {
			continue
		}
		if _, ok := announced[e.node]; ok {
			t.Errorf("%s announced running twice", e.node)
		}
		announced[e.node] = e.started
	}
	var latest time.Duration
	defer func() { t.Logf("announced at most %s before its command started", latest.Round(time.Millisecond)) }()
	for i := range 8 {
		n := fmt.Sprintf("n%d", i)
		started, ok := starts[n]
		if !ok {
			t.Errorf("%s: its command never started", n)
			continue
		}
		if a := doc.Formulas["f"].Nodes[n]; a.Attempts != 1 || a.Status != dag.NodeSucceeded {
			t.Errorf("%s: %s after %d attempts", n, a.Status, a.Attempts)
		}
		at, ok := announced[n]
		if !ok {
			t.Errorf("%s: never announced running", n)
			continue
		}
		early := started.Sub(at)
		latest = max(latest, early)
		if early > 500*time.Millisecond {
			t.Errorf("%s announced running %s before its command started (it waited for a session)", n, early.Round(time.Millisecond))
		}
	}
}

// SIGINT (the services' context cancelled) while nodes wait for the one
// session a host allows: the executor stops within a bounded time (the
// node that runs ends, none of the others starts), and the nodes that
// never started are neither announced running nor failed: their dispatch
// goes back for the next executor.
func TestStopWhileNodesWaitForSessions(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1, perHost: 8, ssh: sshtest.Options{HostConfig: map[int][]string{0: {"MaxSessions 1"}}}})
	dir := t.TempDir()
	id := s.mustSubmit(eightNodes(s.fleet, dir, "5"))
	deadline := time.Now().Add(30 * time.Second)
	for len(commandStarts(t, dir)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no node started within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // the others wait for the session
	took := s.stopServices(20 * time.Second)
	if t.Failed() {
		return
	}
	t.Logf("services stopped %s after the cancel", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Fatalf("services stopped %s after the cancel, want the running node's end (5s) at most", took.Round(time.Millisecond))
	}
	starts := commandStarts(t, dir)
	if len(starts) != 1 {
		t.Fatalf("%d commands started, want the one running when the services stopped: %v", len(starts), starts)
	}
	for _, e := range s.events(id) {
		if e.typ.Family() != events.FamilyNode {
			continue
		}
		if _, ran := starts[e.node]; !ran && (e.status == string(dag.NodeFailed) || e.status == string(dag.NodeRunning) && e.reason == "") {
			t.Errorf("%s, which never started: event %s %q", e.node, e.status, e.err)
		}
	}
}
