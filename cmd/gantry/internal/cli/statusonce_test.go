package cli

import (
	"sync/atomic"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
)

// gantry status of a whole id asks the state-store once: its --timeout
// bounds the call. It asked twice (the id's look-up, then the document),
// so a state-store that did not answer held it for two timeouts (5.3 s
// of a 3 s --timeout, with a NATS node cut off).
func TestStatusOfAWholeIDAsksOnce(t *testing.T) {
	const id = "01a21846-0000-7000-8000-000000000001"
	url, nc := fakeBus(t, nil)
	var asked atomic.Int32
	if _, err := nc.Subscribe(events.StateWorkflow, func(m *nats.Msg) {
		asked.Add(1)
		_ = m.Respond(mustJSON(events.WorkflowDoc{WorkflowID: id, Workflow: "w", Status: dag.WorkflowSucceeded, Generation: 1}))
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "status", id, "--server", url, "--timeout", "3s")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("asked the state-store %d times, want once", n)
	}
}
