package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
)

// bigFleetYAML is one formula fanned out over n local hosts, one node each.
func bigFleetYAML(name string, n int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nhosts:\n", name)
	for i := range n {
		fmt.Fprintf(&b, "  h%05d: {transport: local, labels: {role: web}}\n", i)
	}
	b.WriteString("groups:\n  web: {labels: {role: web}}\nformulas:\n  - id: app\n    group: web\n" +
		"    nodes:\n      - {name: conf, run: 'echo ran {{ .Host }} # " + strings.Repeat("configure the app ", 55) + "'}\n")
	return []byte(b.String())
}

// A fleet whose plan, record and state are larger than one NATS message
// is accepted, answered and shown: large records and replies travel
// compressed. Submitting it again skips every node already done, read
// from the per-host projection of all its hosts at once.
func TestFleetLargerThanAMessage(t *testing.T) {
	const hosts = 1200
	s := newStack(t, stackOptions{})
	doc := bigFleetYAML("big-fleet", hosts)
	r, code := s.submit(doc)
	if code != "" || r.Status != "accepted" {
		t.Fatalf("submit (%s): %s %v", code, r.Status, r.Errors)
	}
	if plan, _ := json.Marshal(r.Plan); len(plan) <= eventbus.MaxMessageBytes || len(r.Plan.Formulas) != hosts {
		t.Fatalf("the plan reply is %d bytes for %d formulas: the test needs more than a message (%d)", len(plan), len(r.Plan.Formulas), eventbus.MaxMessageBytes)
	}
	first := s.wait(r.WorkflowID, 3*time.Minute)
	if first.Status != dag.WorkflowSucceeded || len(first.Formulas) != hosts {
		t.Fatalf("first run: %s with %d formulas in its state", first.Status, len(first.Formulas))
	}
	if lines := s.logLines(r.WorkflowID); len(lines) != hosts {
		t.Fatalf("first run: %d output lines, want %d", len(lines), hosts)
	}
	again, code := s.submit(doc)
	if code != "" || again.Status != "accepted" {
		t.Fatalf("second submit (%s): %s %v", code, again.Status, again.Errors)
	}
	second := s.wait(again.WorkflowID, 3*time.Minute)
	if second.Status != dag.WorkflowSucceeded {
		t.Fatalf("second run: %s", second.Status)
	}
	if lines := s.logLines(again.WorkflowID); len(lines) != 0 {
		t.Fatalf("second run: %d nodes ran again (%q...), want none: all were done", len(lines), lines[0])
	}
}
