package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// A node cancelled while it waited for its host's slot ("cancelled before
// it started": nothing ran) must keep what an earlier create put in
// place (docs/composition.md, Drift: "A node blocked or cancelled before
// it started in a later run keeps what an earlier create put in place"):
// a new submission of the earlier spec skips it as already done.
func TestCancelledWhileWaitingForASlotKeepsWhatIsInPlace(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	ran := filepath.Join(h.Dir, "ran")
	comp := func(timeout, word string) string {
		return fmt.Sprintf(`
name: slotskip
%s
hosts:
  h: {address: %q, user: %q, max_parallel: 1}
formulas:
  - id: f
    server: h
    nodes: [{name: n, run: "echo %s >> %s"}]
`, timeout, h.Addr, s.fleet.User, word, ran)
	}
	hog := fmt.Sprintf(`
name: hog
hosts:
  h: {address: %q, user: %q, max_parallel: 1}
formulas:
  - id: f
    server: h
    nodes: [{name: n, run: %q}]
`, h.Addr, s.fleet.User, uniqueSleep(6))

	a := s.submitYAML(comp("", "A"))
	if doc := s.wait(a, 30*time.Second); doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("first run %s: %s", doc.Status, doc.Error)
	}
	hid := s.submitYAML(hog)
	s.waitFor("the hog to run", 10*time.Second, func() bool {
		return s.status(hid).Formulas["f"].Nodes["n"].Status == dag.NodeRunning
	})
	// Another spec, with a deadline that passes while it waits for the slot.
	b := s.submitYAML(comp("timeout: 2s", "B"))
	doc := s.wait(b, 30*time.Second)
	if n := doc.Formulas["f"].Nodes["n"]; n.Status != dag.NodeCancelled {
		t.Fatalf("the waiting node is %s (%q), want cancelled", n.Status, n.Reason)
	}
	s.wait(hid, 30*time.Second)
	got, _ := os.ReadFile(ran)
	if string(got) != "A\n" {
		t.Fatalf("the host ran %q, want only A", got)
	}
	// The first spec again: it is in place, nothing ran since.
	c := s.submitYAML(comp("", "A"))
	doc = s.wait(c, 30*time.Second)
	got, _ = os.ReadFile(ran)
	if n := doc.Formulas["f"].Nodes["n"]; n.Status != dag.NodeSkipped || strings.Count(string(got), "A") != 1 {
		t.Fatalf("resubmitted the spec in place: node %s (%q), the host ran %q; want skipped, A once", n.Status, n.Reason, got)
	}
}
