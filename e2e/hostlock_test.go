package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
)

// Two workflows of one composition, submitted at once, never run the same
// node at the same time on its host: the second waits for the first.
func TestTwoWorkflowsOneHostNode(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	release := filepath.Join(dir, "release")
	name := fmt.Sprintf("twice-%d", time.Now().UnixNano()%1e9)
	// A failed test still lets the holder end, before the services stop.
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o644) })
	// The first to hold the host lock keeps it until the test has seen the
	// second one wait (bounded: 30 s), so they overlap however loaded the
	// machine is.
	c := func() *dag.Composition {
		// A name of its own: the host lock is per composition, and other
		// runs of this test on the machine must not hold it.
		return &dag.Composition{Name: name, Reset: true, Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
			Formulas: []dag.Formula{{ID: "pkg", Server: "me", Nodes: []dag.Node{{Name: "install",
				Run: "echo in >>" + log + "; i=0; while [ ! -e " + release + " ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo out >>" + log}}}}}
	}
	// The wait is seen live on the bus (polling the stream would make a
	// consumer per look).
	var mu sync.Mutex
	var reasons []string
	sub, err := s.nc.Subscribe(events.AllHostLifecycle, func(m *nats.Msg) {
		env, err := events.Parse(m.Data)
		if err != nil || env.Type.Family() != events.FamilyNode {
			return
		}
		var n events.NodeEvent
		if events.DecodeData(env, &n) == nil && n.Status == dag.NodeRunning && n.Reason != "" {
			mu.Lock()
			reasons = append(reasons, n.WorkflowID+" "+n.Reason)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	a, b := s.mustSubmit(c()), s.mustSubmit(c())
	waited := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range reasons {
			if r == a+" waiting for workflow "+b+" (the same node runs there) on this host" || r == b+" waiting for workflow "+a+" (the same node runs there) on this host" {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(30 * time.Second)
	for !waited() {
		if time.Now().After(deadline) {
			got, _ := os.ReadFile(log)
			mu.Lock()
			t.Fatalf("no workflow said it waits for the other; the host's log %q; running reasons %q", got, reasons)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a, b} {
		if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
			t.Fatalf("%s: %s", id, d.Status)
		}
	}
	got, _ := os.ReadFile(log)
	if f := strings.Join(strings.Fields(string(got)), " "); f != "in out in out" {
		t.Fatalf("the node ran as %q on the host: two copies overlapped", f)
	}
	// The one that waited said for whom, as a node event.
	said := 0
	for _, pair := range [][2]string{{a, b}, {b, a}} {
		for _, e := range s.events(pair[0]) {
			if e.status == "running" && strings.Contains(e.reason, "waiting for workflow "+pair[1]) {
				said++
			}
		}
	}
	if said != 1 {
		t.Fatalf("%d waiting events, want 1", said)
	}
}
