package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
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
	r, code := s.submit(silentComposition("silent", addr))
	if code != "" {
		t.Fatalf("rejected: %v", r.Errors)
	}
	d := s.wait(r.WorkflowID, 30*time.Second)
	n := d.Formulas["f"].Nodes["n"]
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
	r, code := s.submit(silentComposition("connecting", addr))
	if code != "" {
		t.Fatalf("rejected: %v", r.Errors)
	}
	id := r.WorkflowID
	s.waitFor("the formula to run", 20*time.Second, func() bool {
		f := s.status(id).Formulas["f"]
		return f != nil && f.Status == dag.FormulaRunning
	})
	time.Sleep(500 * time.Millisecond) // well into the connection's set-up
	asked := time.Now()
	if body, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel refused (%s): %s", code, body)
	}
	d := s.wait(id, 20*time.Second)
	took := time.Since(asked)
	n := d.Formulas["f"].Nodes["n"]
	if d.Status != dag.WorkflowCancelled || n.Status != dag.NodeCancelled {
		t.Fatalf("after cancel: workflow %s, node %s %q; want cancelled, cancelled", d.Status, n.Status, n.Error)
	}
	t.Logf("cancelled %s after the request", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the cancel took %s: it waited for the connection's set-up", took)
	}
}
