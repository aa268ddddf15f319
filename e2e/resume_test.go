package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// After pause and resume, the stream holds both "running" transitions, and
// status and watch say RUNNING again, then SUCCEEDED.
func TestPauseResumeAgree(t *testing.T) {
	s := newStack(t, stackOptions{})
	bin := buildGantry(t)
	c := &dag.Composition{Name: "resumable", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{
			{ID: "first", Server: "me", Nodes: []dag.Node{{Name: "a", Run: "sleep 1"}}},
			{ID: "second", Server: "me", DependsOn: []dag.FormulaDep{{Formula: "first"}}, Nodes: []dag.Node{{Name: "b", Run: "sleep 2"}}},
		}}
	id := s.mustSubmit(c)
	if body, code := s.control(id, events.VerbPause); code != "" {
		t.Fatalf("pause: %s %s", code, body)
	}
	s.waitFor("paused in the projection", 15*time.Second, func() bool { return s.status(id).Status == dag.WorkflowPaused })
	if body, code := s.control(id, events.VerbResume); code != "" {
		t.Fatalf("resume: %s %s", code, body)
	}
	s.waitFor("running again in the projection", 10*time.Second, func() bool { return s.status(id).Status == dag.WorkflowRunning })
	cli := func(args ...string) string {
		out, _ := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Viewer))...).CombinedOutput()
		return string(out)
	}
	if out := cli("status", id); !strings.Contains(out, "RUNNING") && !strings.Contains(out, "running") {
		t.Fatalf("status after resume:\n%s", out)
	}
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("ended %s", d.Status)
	}
	var got []string
	for _, e := range s.events(id) {
		if e.typ.Family() == events.FamilyWorkflow {
			got = append(got, e.status)
		}
	}
	if strings.Join(got, " ") != "accepted running paused running succeeded" {
		t.Fatalf("workflow events in the stream: %q", got)
	}
	out := cli("watch", id, "--timeout", "20s")
	p, r := strings.Index(out, "PAUSED"), strings.LastIndex(out, "RUNNING")
	if p < 0 || r < p || !strings.Contains(out[r:], "SUCCEEDED") {
		t.Fatalf("watch did not show PAUSED, RUNNING, SUCCEEDED in order:\n%s", out)
	}
}
