package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A node ends on its host while its executor is down, and the next
// executor settles its attempt over SSH: the output tails it reads back
// from the host hide the node's secret as a followed run's do, the end of
// one the tail's cut began inside included. The node prints its password,
// then 4,064 more bytes: the last 4,096 (what a settle reads) begin 10
// bytes into the password.
func TestASettledNodeShowsNoSecretOverSSH(t *testing.T) {
	const password = "hunter2-VERY-SECRET-db-password-0123456789"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "db_pass"), []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{hosts: 1})
	x := startExecutor(t, s, "GANTRY_SECRETS_DIR="+dir)
	c := farComp(s, "settled-secret", dag.Node{Name: "pw", Run: `printf '%s' "$DB_PASS"; head -c 4064 /dev/zero | tr '\0' x; sleep 3`})
	c.Formulas[0].Nodes[0].Env["DB_PASS"] = dag.SecretRef("db_pass")
	id := s.mustSubmit(c)
	s.waitFor("the node to run", 20*time.Second, func() bool { return s.nodeState(id, "work", "pw") == dag.NodeRunning })
	x.kill9()
	if body, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel: %s %s", code, body)
	}
	s.waitFor("the node to end on its host", 10*time.Second, func() bool { _, st := s.hostAttempt(id, 1, "pw"); return st != "" })
	x.start()
	s.wantNodeEnd(id, "settled-secret", "pw", dag.NodeSucceeded, 30*time.Second)
	var tail string
	s.workflowEnvelopes(events.StreamEvents, id, func(env *events.Envelope) {
		var n events.NodeEvent
		if env.Type.Family() == events.FamilyNode && json.Unmarshal(env.Data, &n) == nil && n.Status == dag.NodeSucceeded {
			tail = n.StdoutTail
		}
	})
	if strings.Contains(tail, password[10:]) || !strings.HasPrefix(tail, "***xxx") {
		t.Errorf("the settled node's output tail begins %.60q, want the end of the password masked", tail)
	}
}

// A node that writes outputs ends on its host while its executor is down;
// the workflow is cancelled meanwhile, the next executor settles the
// attempt over SSH and keeps its outputs, and a retry runs the node that
// reads them with their values. Before, a settle kept no outputs: the
// dependent failed "output missing".
func TestASettledNodesOutputsAreKeptForItsDependents(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	x := startExecutor(t, s)
	h := s.fleet.Hosts[0]
	m := filepath.Join(h.Dir, "markers")
	port := dag.OutputRef{Formula: "work", Node: "gen", Name: "port"}.Marker()
	c := farComp(s, "settled-outputs",
		dag.Node{Name: "gen", Run: `echo port=8080 >> "$GANTRY_OUTPUT"; sleep 3`, Outputs: []dag.Output{{Name: "port"}}},
		dag.Node{Name: "use", DependsOn: []string{"gen"}, Run: "echo use " + port + " >> " + m})
	id := s.mustSubmit(c)
	s.waitFor("the node to run", 20*time.Second, func() bool { return s.nodeState(id, "work", "gen") == dag.NodeRunning })
	x.kill9()
	if body, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel: %s %s", code, body)
	}
	s.waitFor("the node to end on its host", 10*time.Second, func() bool { _, st := s.hostAttempt(id, 1, "gen"); return st != "" })
	x.start()
	s.wantNodeEnd(id, "settled-outputs", "gen", dag.NodeSucceeded, 30*time.Second)
	if body, code := s.control(id, events.VerbRetry); code != "" {
		t.Fatalf("retry: %s %s", code, body)
	}
	if d := s.waitGen(id, 2, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Errorf("retry: workflow %s (%+v)", d.Status, d.Formulas["work"])
	}
	if b, _ := os.ReadFile(m); strings.TrimSpace(string(b)) != "use 8080" {
		t.Errorf("the dependent ran %q, want %q", b, "use 8080")
	}
}
