package events_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The wire contract stands apart from the bus it travels on: pkg/events
// links no NATS package (the JetStream plumbing is pkg/eventbus), so
// whatever reads or writes gantry's events, records and permissions
// can do so without a NATS client.
func TestEventsImportsNoNATS(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var nats []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/nats-io/") {
			nats = append(nats, p)
		}
	}
	if len(nats) > 0 {
		t.Errorf("pkg/events imports NATS packages: %s", strings.Join(nats, ", "))
	}
}
