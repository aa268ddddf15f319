package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// hostDocs reads the per-host projection of a host (state.host) as JSON
// objects, so that a test states what it expects field by field.
func (s *stack) hostDocs(host string) []map[string]any {
	s.t.Helper()
	b, _ := json.Marshal(events.HostQuery{Host: host})
	var docs []map[string]any // not client.Host's typed nodes: the fields as sent
	if err := s.cl.WithTimeout(5*time.Second).Request(context.Background(), events.StateHost, b, nil, &docs); err != nil {
		s.t.Fatalf("state.host %s: %s", host, failure(err))
	}
	return docs
}

// hostDoc finds the document of workflow's formula/node among docs
// (documents that name no composition match any).
func hostDoc(docs []map[string]any, workflow, formula, node string) map[string]any {
	for _, d := range docs {
		if d["formula"] == formula && d["node"] == node && (d["workflow"] == nil || d["workflow"] == workflow) {
			return d
		}
	}
	return nil
}

// wantHostDoc checks the fields want names (null: absent) in the
// per-host document of workflow's formula/node on host.
func (s *stack) wantHostDoc(host, workflow, formula, node string, want map[string]any) {
	s.t.Helper()
	d := hostDoc(s.hostDocs(host), workflow, formula, node)
	if d == nil {
		s.t.Errorf("no per-host document of %s %s/%s on %s", workflow, formula, node, host)
		return
	}
	for k, v := range want {
		if fmt.Sprint(d[k]) != fmt.Sprint(v) {
			s.t.Errorf("%s %s/%s on %s: %s = %v, want %v", workflow, formula, node, host, k, d[k], v)
		}
	}
}

// A check run reports what would change; it does not make a node that
// was never created look done.
func TestDriftAfterCheckRun(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	chk := localComp(dir, "checked", "")
	chk.Operation = dag.OpCheck
	if d := s.wait(s.mustSubmit(chk), 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("check run: %s", d.Status)
	}
	rep := s.drift(localComp(dir, "checked", ""))
	if rep.Counts[events.DriftMissing] != 4 || len(rep.Items) != 4 {
		t.Errorf("after a check run of nodes never created: %+v", rep)
	}
	s.wantHostDoc("me", "checked", "base", "a", map[string]any{"status": dag.NodePending, "operation": ""})
	if d := hostDoc(s.hostDocs("me"), "checked", "base", "a"); d != nil {
		if c, _ := d["check"].(map[string]any); c == nil || c["result"] != string(events.CheckWouldChange) {
			t.Errorf("base/a's check result: %v", d["check"])
		}
	}
	// Created, then checked: ok, and the check is kept beside the create.
	cid := s.mustSubmit(localComp(dir, "checked", ""))
	if d := s.wait(cid, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("create: %s", d.Status)
	}
	if d := s.wait(s.mustSubmit(chk), 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("second check run: %s", d.Status)
	}
	if rep := s.drift(localComp(dir, "checked", "")); rep.Counts[events.DriftOK] != 4 {
		t.Errorf("after create and check: %+v", rep)
	}
	s.wantHostDoc("me", "checked", "base", "a", map[string]any{"status": dag.NodeSucceeded, "operation": dag.OpCreate, "workflow_id": cid})
}

// Two compositions that use the same formula ids on one host keep their
// own records: neither overwrites the other's, the drift of one is not
// about the other's nodes, and a re-submission skips what its own
// composition did.
func TestCompositionsSharingFormulaIDs(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	// No check commands: only the per-host projection tells what is done.
	comp := func(name string) *dag.Composition {
		c := localComp(dir, name, "")
		for i := range c.Formulas {
			for j := range c.Formulas[i].Nodes {
				c.Formulas[i].Nodes[j].Check = ""
				if name == "two" {
					c.Formulas[i].Nodes[j].Run += " # two"
				}
			}
		}
		return c
	}
	one, two := comp("one"), comp("two")
	two.Formulas[1].Nodes = append(two.Formulas[1].Nodes, dag.Node{Name: "e", Run: "echo two/e >> " + dir + "/markers"})
	id1 := s.mustSubmit(one)
	if d := s.wait(id1, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("one: %s", d.Status)
	}
	id2 := s.mustSubmit(two)
	if d := s.wait(id2, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("two: %s", d.Status)
	}
	if rep := s.drift(comp("one")); rep.Counts[events.DriftOK] != 4 || len(rep.Items) != 4 {
		t.Errorf("drift of one after two ran: %+v", rep)
	}
	s.wantHostDoc("me", "one", "base", "a", map[string]any{"workflow": "one", "workflow_id": id1})
	s.wantHostDoc("me", "two", "base", "a", map[string]any{"workflow": "two", "workflow_id": id2})
	if n := len(s.hostDocs("me")); n != 9 {
		t.Errorf("state.host me has %d documents, want 9 (one: 4, two: 5)", n)
	}
	// one again: every node is one's own and done, so nothing runs.
	before := len(lines(t, dir+"/markers"))
	if d := s.wait(s.mustSubmit(comp("one")), 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("one again: %s", d.Status)
	} else {
		for fid, f := range d.Formulas {
			for name, n := range f.Nodes {
				if n.Status != dag.NodeSkipped {
					t.Errorf("one again: %s/%s = %s, want skipped", fid, name, n.Status)
				}
			}
		}
	}
	if got := lines(t, dir+"/markers"); len(got) != before {
		t.Errorf("one again ran %v", strings.Join(got[before:], ", "))
	}
}
