package project_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// The node document keeps what its last attempt said of its files; a new
// attempt starts without them.
func TestFilesProjected(t *testing.T) {
	f := newFeed(t)
	w := f.workflow("w", "wf-1", dag.OpCreate)
	files := []events.FileResult{{Path: "/etc/app.conf", Status: events.FileChanged, SHA256: "ab", Differs: []string{"missing"}}}
	w.node("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Run: events.Run{Attempt: 1}})
	code := 1
	w.node("a", dag.NodeFailed, events.NodeEvent{SpecHash: spec("a"), WillRetry: true, Files: files, Run: events.Run{Attempt: 1, ExitCode: &code}})
	if nd, _ := f.nodeDoc("wf-1", "a"); len(nd.Files) != 1 || nd.Files[0].Path != "/etc/app.conf" || nd.Files[0].Status != events.FileChanged {
		t.Fatalf("files after the first attempt: %+v", nd.Files)
	}
	w.node("a", dag.NodeRunning, events.NodeEvent{SpecHash: spec("a"), Run: events.Run{Attempt: 2}})
	if nd, raw := f.nodeDoc("wf-1", "a"); nd.Files != nil || raw["files"] != nil {
		t.Fatalf("a new attempt kept the old files: %+v", nd.Files)
	}
	files[0].Status = events.FileUnchanged
	w.node("a", dag.NodeSkipped, events.NodeEvent{SpecHash: spec("a"), Files: files, Run: events.Run{Attempt: 2}})
	if nd, _ := f.nodeDoc("wf-1", "a"); len(nd.Files) != 1 || nd.Files[0].Status != events.FileUnchanged {
		t.Fatalf("files after the second attempt: %+v", nd.Files)
	}
}
