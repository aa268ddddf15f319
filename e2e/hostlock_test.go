package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Two workflows of one composition, submitted at once, never run the same
// node at the same time on its host: the second waits for the first.
func TestTwoWorkflowsOneHostNode(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	c := func() *dag.Composition {
		return &dag.Composition{Name: "twice", Reset: true, Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
			Formulas: []dag.Formula{{ID: "pkg", Server: "me", Nodes: []dag.Node{{Name: "install",
				Run: "echo in >>" + log + "; sleep 1; echo out >>" + log}}}}}
	}
	a, b := s.mustSubmit(c()), s.mustSubmit(c())
	for _, id := range []string{a, b} {
		if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
			t.Fatalf("%s: %s", id, d.Status)
		}
	}
	got, _ := os.ReadFile(log)
	if f := strings.Join(strings.Fields(string(got)), " "); f != "in out in out" {
		t.Fatalf("the node ran as %q on the host: two copies overlapped", f)
	}
	// The one that waited said for whom, as a node event.
	said := 0
	for _, pair := range [][2]string{{a, b}, {b, a}} {
		for _, e := range s.events(pair[0]) {
			if e.status == "running" && strings.Contains(e.reason, "waiting for workflow "+pair[1]) {
				said++
			}
		}
	}
	if said != 1 {
		t.Fatalf("%d waiting events, want 1", said)
	}
}
