package webview_test

import (
	"encoding/json"
	"testing"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Attempt 1 reports 60% and fails (will retry); attempt 2 starts: the
// page must not show attempt 1's 60% for attempt 2 (the state-store
// resets progress when an attempt starts, rules.go foldNode).
func TestANewAttemptHasNoProgressOfTheLast(t *testing.T) {
	m := webview.NewModel(wfID)
	apply(t, m, accepted(t), node(t, "base", "a", dag.NodeRunning, 1))
	data := `{"workflow_id":"` + wfID + `","formula":"base","node":"a","host":"h1","generation":1,"attempt":1,"percent":60}`
	m.ApplyEvent(&events.Envelope{SpecVersion: events.SpecVersion, ID: "prog1", Source: "executor/1", Type: webview.TypeProgress, Subject: wfID + "/base/a", Data: json.RawMessage(data)})
	failed := &events.NodeEvent{Ref: ref("base", "h1", "a"), Status: dag.NodeFailed, WillRetry: true, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t0, Error: "exit status 1"}}
	apply(t, m, env(t, failed), node(t, "base", "a", dag.NodeRunning, 2))
	n := nodeOf(t, m, "base/a")
	if n.Status != "running" || n.Progress != nil {
		t.Errorf("attempt 2 running shows progress %v (attempt 1's), status %s", n.Progress, n.Status)
	}
}
