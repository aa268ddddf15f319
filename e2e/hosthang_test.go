package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

func silentComposition(name, addr string) []byte {
	return []byte(fmt.Sprintf(`{"name":%q,"hosts":{"stuck":{"address":%q,"user":"root"}},
		"retry":{"max_attempts":1},
		"formulas":[{"id":"f","server":"stuck","nodes":[{"name":"n","run":"true"}]}]}`, name, addr))
}

// A host that accepts TCP and never speaks SSH fails its node within the
// connect timeout, the phase named; the workflow ends failed.
func TestSilentHostFailsItsNode(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1, connectTimeout: time.Second})
	addr := sshtest.Silent(t)
	tl := newTimeline()
	defer func() { t.Logf("timeline:\n%s", tl) }()
	r, code := s.submit(silentComposition("silent", addr))
	if code != "" {
		t.Fatalf("rejected: %v", r.Errors)
	}
	tl.at("submitted " + r.WorkflowID)
	s.watchStatus(tl, r.WorkflowID)
	d := s.wait(r.WorkflowID, 30*time.Second)
	n := d.Formulas["f"].Nodes["n"]
	tl.at("gantry status: workflow " + string(d.Status) + ": " + d.Error + "; node " + string(n.Status) + ": " + n.Error)
	want := "no SSH banner from " + addr + " within 1s"
	if d.Status != dag.WorkflowFailed || n.Status != dag.NodeFailed || !strings.Contains(n.Error, want) {
		t.Fatalf("workflow %s, node %s %q; want failed, failed saying %q", d.Status, n.Status, n.Error, want)
	}
}

// Cancelling a workflow whose node is still connecting to its host (a
// connect timeout of a minute) ends the node cancelled, and the workflow,
// within seconds.
func TestCancelWhileConnecting(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1, connectTimeout: time.Minute})
	addr := sshtest.Silent(t)
	tl := newTimeline()
	defer func() { t.Logf("timeline:\n%s", tl) }()
	r, code := s.submit(silentComposition("connecting", addr))
	if code != "" {
		t.Fatalf("rejected: %v", r.Errors)
	}
	id := r.WorkflowID
	tl.at("submitted " + id)
	s.watchStatus(tl, id)
	s.waitFor("the formula to run", 20*time.Second, func() bool {
		f := s.status(id).Formulas["f"]
		return f != nil && f.Status == dag.FormulaRunning
	})
	tl.at("gantry status: formula running (connecting)")
	time.Sleep(500 * time.Millisecond) // well into the connection's set-up
	asked := time.Now()
	tl.at("cancel requested")
	if body, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel refused (%s): %s", code, body)
	}
	tl.at("cancel answered")
	d := s.wait(id, 20*time.Second)
	took := time.Since(asked)
	n := d.Formulas["f"].Nodes["n"]
	tl.at(fmt.Sprintf("gantry status: workflow %s; node %s, error %q, reason %q", d.Status, n.Status, n.Error, n.Reason))
	if d.Status != dag.WorkflowCancelled || n.Status != dag.NodeCancelled {
		t.Fatalf("after cancel: workflow %s, node %s %q; want cancelled, cancelled", d.Status, n.Status, n.Error)
	}
	t.Logf("cancelled %s after the request", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the cancel took %s: it waited for the connection's set-up", took)
	}
}

// A host that stops answering while its node runs (its sshd, the
// connection's sshd and what runs below them frozen with SIGSTOP: TCP
// stays open, nothing answers): the keepalives find it, and the node fails
// naming the host and that it stopped answering, within the documented
// bound (--ssh-keepalive × (3 missed + 1), then one try to re-attach
// within --ssh-connect-timeout, plus slack); the workflow ends failed, and
// the services stop while the host is still frozen.
func TestHostStopsAnsweringMidRun(t *testing.T) {
	const keepalive, connect = time.Second, 2 * time.Second
	s := newStack(t, stackOptions{hosts: 1, keepalive: keepalive, connectTimeout: connect})
	h := s.fleet.Hosts[0]
	sleep := uniqueSleep(60)
	marker := filepath.Join(h.Dir, "started")
	comp := fmt.Sprintf(`{"name":"frozen","hosts":{"h":{"address":%q,"user":%q}},"retry":{"max_attempts":1},
		"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":%q,"env":{"GANTRY_ATTEMPTS":%q}}]}]}`,
		h.Addr, s.fleet.User, "touch "+marker+"; "+sleep, filepath.Join(h.Dir, "attempts"))
	tl := newTimeline()
	defer func() { t.Logf("timeline:\n%s", tl) }()
	remote := watchRemote(t, tl, sleep)
	t.Cleanup(func() { remote.kill(t) })
	r, code := s.submit([]byte(comp))
	if code != "" {
		t.Fatalf("rejected: %v", r.Errors)
	}
	id := r.WorkflowID
	tl.at("submitted " + id)
	s.watchStatus(tl, id)
	s.waitFor("the node to run on the host", 20*time.Second, func() bool {
		_, err := os.Stat(marker)
		n := s.status(id).Formulas["f"]
		return err == nil && remote.running() && n != nil && n.Nodes["n"].Status == dag.NodeRunning
	})
	time.Sleep(2 * keepalive) // keepalives have been answered
	thaw := h.Freeze()
	t.Cleanup(thaw)
	frozen := tl.at("host frozen (SIGSTOP: its sshd, the connection's sshd and below)")
	bound := keepalive*time.Duration(sshexec.KeepaliveMissed+1) + time.Second + connect + 3*time.Second
	d := s.wait(id, bound+30*time.Second)
	took := tl.at("gantry status: workflow "+string(d.Status)+": "+d.Error) - frozen
	n := d.Formulas["f"].Nodes["n"]
	tl.at("gantry status: node " + string(n.Status) + ": " + n.Error)
	if d.Status != dag.WorkflowFailed || n.Status != dag.NodeFailed {
		t.Fatalf("workflow %s, node %s %q; want failed, failed", d.Status, n.Status, n.Error)
	}
	for _, want := range []string{h.Addr, "stopped answering", "keepalive"} {
		if !strings.Contains(n.Error, want) {
			t.Errorf("the node's error %q does not say %q", n.Error, want)
		}
	}
	if took > bound {
		t.Errorf("the workflow ended %.1fs after the host froze, want within %s", took.Seconds(), bound)
	}
	stopped := s.stopServices(20 * time.Second)
	tl.at(fmt.Sprintf("services stopped (%.1fs), the host still frozen", stopped.Seconds()))
}
