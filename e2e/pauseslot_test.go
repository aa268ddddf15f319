package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// docs/guarantees.md: "pause stops new nodes from starting, everywhere".
// A node that was dispatched and waits for a slot of a limit when the
// workflow is paused must not start when the slot frees while the
// workflow is still paused.
func TestPauseHoldsANodeWaitingForASlot(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	doc := fmt.Sprintf(`
name: pauseslot
hosts:
  c1: {transport: local, labels: {pool: z}}
  c2: {transport: local, labels: {pool: z}}
groups:
  pool: {labels: {pool: z}}
limits:
  - {group: pool, max_parallel: 1}
formulas:
  - id: w
    group: pool
    nodes:
      - {name: n, run: "while [ ! -e %s ]; do sleep 0.05; done; touch %s/ran-{{ .Host }}"}
`, release, dir)
	id := s.submitYAML(doc)
	// One instance runs, the other waits for the group's slot.
	s.waitFor("one node to run and one to wait for the slot", 30*time.Second, func() bool {
		d := s.status(id)
		running := 0
		for _, f := range []string{"w-c1", "w-c2"} {
			if fd := d.Formulas[f]; fd != nil && fd.Nodes["n"] != nil && fd.Nodes["n"].Status == dag.NodeRunning {
				running++
			}
		}
		return running == 2
	})
	if body, code := s.control(id, events.VerbPause); code != "" {
		t.Fatalf("pause: %s %s", code, body)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil { // the slot holder ends
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	ran := 0
	for _, h := range []string{"c1", "c2"} {
		if _, err := os.Stat(filepath.Join(dir, "ran-"+h)); err == nil {
			ran++
		}
	}
	d := s.status(id)
	if ran != 1 {
		t.Fatalf("paused before the slot freed, %d node(s) ran on their hosts (want 1: the one holding the slot); workflow %s", ran, d.Status)
	}
	if body, code := s.control(id, events.VerbResume); code != "" {
		t.Fatalf("resume: %s %s", code, body)
	}
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("after the resume: %s %s", d.Status, d.Error)
	}
}
