package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// local composition writing "<formula>/<node>" (run) and
// "delete <formula>/<node>" (delete) lines to dir/markers.
func localComp(dir, name string, failNode string) *dag.Composition {
	m := dir + "/markers"
	node := func(f, n string, deps ...string) dag.Node {
		nd := dag.Node{Name: n, Run: "echo " + f + "/" + n + " >> " + m, Delete: "echo delete " + f + "/" + n + " >> " + m,
			Check: "grep -qx '" + f + "/" + n + "' " + m}
		if f+"/"+n == failNode {
			nd.Run = "echo " + f + "/" + n + " >> " + m + "; echo cannot >&2; exit 7"
		}
		if deps != nil {
			nd.DependsOn = deps
		}
		return nd
	}
	return &dag.Composition{Name: name, Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{
			{ID: "base", Server: "me", Nodes: []dag.Node{node("base", "a"), node("base", "b")}},
			{ID: "app", Server: "me", DependsOn: []dag.FormulaDep{{Formula: "base"}}, Nodes: []dag.Node{node("app", "c"), node("app", "d")}},
		}}
}

func lines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// on_failure rollback: the nodes that succeeded run their delete in
// reverse dependency order, and the workflow ends failed, saying so.
func TestRollback(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	c := localComp(dir, "rb", "app/d")
	c.OnFailure = dag.OnFailureRollback
	for i := range c.Formulas {
		for j := range c.Formulas[i].Nodes {
			c.Formulas[i].Nodes[j].Check = ""
		}
	}
	id := s.mustSubmit(c)
	doc := s.wait(id, 30*time.Second)
	if doc.Status != dag.WorkflowFailed || !strings.Contains(doc.Error, "formula app: node(s) failed: d; rolled back: 3 of 3 succeeded nodes deleted") {
		t.Fatalf("workflow %s: %q", doc.Status, doc.Error)
	}
	got := lines(t, dir+"/markers")
	want := []string{"base/a", "base/b", "app/c", "app/d", "delete app/c", "delete base/b", "delete base/a"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("markers %v, want %v", got, want)
	}
	if n := doc.Formulas["base"].Nodes["a"]; n.Operation != dag.OpDelete || n.Status != dag.NodeSucceeded {
		t.Errorf("base/a after rollback: %+v", n)
	}
	if n := doc.Formulas["app"].Nodes["d"]; n.Status != dag.NodeFailed || n.ExitCode == nil || *n.ExitCode != 7 {
		t.Errorf("app/d: %+v", n)
	}
	if _, code := s.control(id, events.VerbRetry); code != "409" {
		t.Errorf("retry after rollback: code %q, want 409", code)
	}
}

// operation delete runs every delete in reverse order; operation check runs
// only checks and reports ok or would_change per node.
func TestDeleteAndCheckOperations(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	if d := s.wait(s.mustSubmit(localComp(dir, "ops", "")), 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("create: %s", d.Status)
	}
	// check: everything is there, except a node whose check looks for something absent
	chk := localComp(dir, "ops", "")
	chk.Operation = dag.OpCheck
	chk.Formulas[1].Nodes[1].Check = "test -e " + dir + "/absent"
	doc := s.wait(s.mustSubmit(chk), 30*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("check run: %s", doc.Status)
	}
	for f, fd := range doc.Formulas {
		for n, nd := range fd.Nodes {
			want := events.CheckOK
			if f == "app" && n == "d" {
				want = events.CheckWouldChange
			}
			if nd.Check != want {
				t.Errorf("check %s/%s = %q, want %q", f, n, nd.Check, want)
			}
		}
	}
	if got := lines(t, dir+"/markers"); len(got) != 4 {
		t.Fatalf("check changed something: %v", got)
	}
	del := localComp(dir, "ops", "")
	del.Operation = dag.OpDelete
	if d := s.wait(s.mustSubmit(del), 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("delete: %s", d.Status)
	}
	got := lines(t, dir+"/markers")[4:]
	want := []string{"delete app/d", "delete app/c", "delete base/b", "delete base/a"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("delete order %v, want %v", got, want)
	}
}

// targets runs only the formulas holding the named nodes plus their
// prerequisites; prerequisites already done are skipped but their gates
// are checked again.
func TestTargets(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	c := localComp(dir, "tgt", "")
	c.Formulas[0].HealthGate = &dag.HealthGate{Check: "grep -q base/a " + dir + "/markers", Timeout: dag.Duration(5 * time.Second), Retries: 2}
	c.Formulas = append(c.Formulas, dag.Formula{ID: "other", Server: "me", Nodes: []dag.Node{{Name: "x", Run: "echo other/x >> " + dir + "/markers"}}})
	c.Targets = []string{"a"} // only base
	doc := s.wait(s.mustSubmit(c), 30*time.Second)
	if doc.Status != dag.WorkflowSucceeded || len(doc.Formulas) != 1 || doc.Formulas["base"] == nil {
		t.Fatalf("targets [a]: %s, formulas %v", doc.Status, doc.Formulas)
	}
	c2 := localComp(dir, "tgt", "")
	c2.Formulas[0].HealthGate = c.Formulas[0].HealthGate
	c2.Formulas = append(c2.Formulas, c.Formulas[2])
	c2.Targets = []string{"d"} // app and its prerequisite base (done: skipped, gate re-checked)
	doc = s.wait(s.mustSubmit(c2), 30*time.Second)
	if doc.Status != dag.WorkflowSucceeded || doc.Formulas["other"] != nil {
		t.Fatalf("targets [d]: %s, formulas %v", doc.Status, doc.Formulas)
	}
	if n := doc.Formulas["base"].Nodes["a"]; n.Status != dag.NodeSkipped {
		t.Errorf("base/a = %s, want skipped", n.Status)
	}
	if h := doc.Formulas["base"].Health; h == nil || h.Status != events.HealthPass {
		t.Errorf("base's gate not checked again: %+v", h)
	}
	got := strings.Join(lines(t, dir+"/markers"), ",")
	if got != "base/a,base/b,app/c,app/d" {
		t.Errorf("markers %s", got)
	}
}
