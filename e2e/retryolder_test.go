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
)

// A retry of an older run puts its spec on the host after a newer run put
// another: a submission of the newer spec must run the node again ("a
// create runs ... after a run with another spec hash"; drift --records
// says changed), not skip it as already done.
func TestRetryOfAnOlderRunIsNotHiddenByANewerRun(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	state, okS1 := filepath.Join(h.Dir, "state"), filepath.Join(h.Dir, "ok-s1")
	comp := func(spec string) string {
		return fmt.Sprintf(`
name: retryolder
hosts:
  h: {address: %q, user: %q}
formulas:
  - id: f
    server: h
    nodes: [{name: x, run: "%s && echo %s > %s"}]
`, h.Addr, s.fleet.User, map[string]string{"S1": "test -e " + okS1, "S2": "true"}[spec], spec, state)
	}
	a := s.submitYAML(comp("S1"))
	if doc := s.wait(a, 30*time.Second); doc.Status != dag.WorkflowFailed {
		t.Fatalf("A %s, want failed", doc.Status)
	}
	b := s.submitYAML(comp("S2"))
	if doc := s.wait(b, 30*time.Second); doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("B %s: %s", doc.Status, doc.Error)
	}
	if err := os.WriteFile(okS1, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if body, code := s.control(a, events.VerbRetry); code != "" {
		t.Fatalf("retry A: %s %s", code, body)
	}
	if doc := s.waitGen(a, 2, 30*time.Second); doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("A's retry %s: %s", doc.Status, doc.Error)
	}
	if got, _ := os.ReadFile(state); strings.TrimSpace(string(got)) != "S1" {
		t.Fatalf("host has %q after A's retry, want S1", got)
	}
	c := s.submitYAML(comp("S2"))
	doc := s.wait(c, 30*time.Second)
	got, _ := os.ReadFile(state)
	if n := doc.Formulas["f"].Nodes["x"]; n.Status == dag.NodeSkipped || strings.TrimSpace(string(got)) != "S2" {
		t.Fatalf("S2 submitted while the host has S1: node %s (%q), host has %q; want it run, S2", n.Status, n.Reason, got)
	}
}
