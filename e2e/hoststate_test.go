package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/micro"
)

// hostDocs reads the per-host projection of a host (state.host) as JSON
// objects, so that a test states what it expects field by field.
func (s *stack) hostDocs(host string) []map[string]any {
	s.t.Helper()
	msg, err := s.nc.Request(events.StateHost, []byte(`{"host":"`+host+`"}`), 5*time.Second)
	if err != nil || msg.Header.Get(micro.ErrorCodeHeader) != "" {
		s.t.Fatalf("state.host %s: %v %s", host, err, msg.Data)
	}
	var docs []map[string]any
	if err := json.Unmarshal(msg.Data, &docs); err != nil {
		s.t.Fatalf("state.host %s: %v", host, err)
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
