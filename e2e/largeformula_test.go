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

// A formula larger than the executor's one-read-per-node limit has its
// node records read with one watch: each node still runs once, in order,
// and a second dispatch of the same workflow (retry) runs none of them again.
func TestLargeFormulaRunsEachNodeOnce(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	log := filepath.Join(dir, "order")
	f := dag.Formula{ID: "big", Server: "me"}
	for i := 0; i < 20; i++ {
		f.Nodes = append(f.Nodes, dag.Node{Name: fmt.Sprintf("n%02d", i), Run: fmt.Sprintf("echo n%02d >> %s", i, log)})
	}
	f.Nodes[19].Run = fmt.Sprintf("test -e %s/go && echo n19 >> %s", dir, log) // fails until go exists
	c := &dag.Composition{Name: "big", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}}, Formulas: []dag.Formula{f}}
	id := s.mustSubmit(c)
	doc := s.wait(id, 30*time.Second)
	if doc.Status != dag.WorkflowFailed || doc.Formulas["big"].Nodes["n19"].Status != dag.NodeFailed {
		t.Fatalf("first run: %s", doc.Status)
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	if body, code := s.control(id, "retry"); code != "" {
		t.Fatalf("retry: %s %s", code, body)
	}
	doc = s.waitGen(id, 2, 30*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("after retry: %s", doc.Status)
	}
	b, _ := os.ReadFile(log)
	var want []string
	for i := 0; i < 20; i++ {
		want = append(want, fmt.Sprintf("n%02d", i))
	}
	if got := strings.Fields(string(b)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("commands ran as %v, want each once in order %v", got, want)
	}
	for i := 0; i < 19; i++ {
		if n := doc.Formulas["big"].Nodes[fmt.Sprintf("n%02d", i)]; n.Attempts != 1 {
			t.Errorf("n%02d: %d attempts", i, n.Attempts)
		}
	}
}
