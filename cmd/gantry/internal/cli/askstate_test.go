package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/micro"
)

// stateReplica serves state.workflow as a state-store replica does: in
// the queue group every replica shares, and on its retry subject, which
// every replica answers. A replica that is not healthy never answers (a
// process stopped, cut off from the cluster, its JetStream gone).
func stateReplica(t *testing.T, ns *natstest.Server, healthy bool) {
	t.Helper()
	svc, err := micro.AddService(ns.Connect(events.StateStore), micro.Config{Name: events.StateStore.ServiceName(), Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	h := micro.HandlerFunc(func(r micro.Request) {
		if healthy {
			b, _ := json.Marshal(events.WorkflowDoc{WorkflowID: "w1", Workflow: "wf", Status: "running"})
			_ = r.Respond(b)
		}
	})
	if err := svc.AddEndpoint("workflow", h, micro.WithEndpointSubject(events.StateWorkflow)); err != nil {
		t.Fatal(err)
	}
	err = svc.AddEndpoint("workflow-retry", h, micro.WithEndpointSubject(events.StateRetry(events.StateWorkflow)), micro.WithEndpointQueueGroupDisabled())
	if err != nil {
		t.Fatal(err)
	}
}

// TestStatusAnsweredWithAReplicaThatDoesNotAnswer: of two state-store
// replicas one never answers; every `gantry status` is answered within
// its --timeout. Before, the queue group gave each read to either, and a
// read given to the silent one waited out its whole timeout and failed:
// about half of them.
func TestStatusAnsweredWithAReplicaThatDoesNotAnswer(t *testing.T) {
	ns := natstest.Start(t)
	stateReplica(t, ns, true)
	stateReplica(t, ns, false)
	var slowest time.Duration
	failed := 0
	for i := range 20 {
		began := time.Now()
		code, out, errOut := run(t, "status", "w1", "-o", "json", "--server", ns.URL(), "--nkey", ns.Keys.SeedFile(events.Viewer), "--timeout", "5s")
		took := time.Since(began)
		slowest = max(slowest, took)
		if code != ExitOK || !strings.Contains(out, `"w1"`) {
			failed++
			t.Errorf("status %d: exit %d after %.1f s: %s", i, code, took.Seconds(), strings.TrimSpace(errOut))
		}
	}
	t.Logf("%d of 20 status calls failed; the slowest answered took %.1f s (timeout 5 s)", failed, slowest.Seconds())
}

// TestStatusNamesTheTriesWhenNoReplicaAnswers: with no replica
// answering, the error says so, with the time waited and the tries.
func TestStatusNamesTheTriesWhenNoReplicaAnswers(t *testing.T) {
	ns := natstest.Start(t)
	stateReplica(t, ns, false)
	stateReplica(t, ns, false)
	code, _, errOut := run(t, "status", "w1", "--server", ns.URL(), "--nkey", ns.Keys.SeedFile(events.Viewer), "--timeout", "2s")
	if code != ExitProblem || !strings.Contains(errOut, "no state-store answered within 2s (3 tries)") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	t.Logf("%s", strings.TrimSpace(errOut))
}
