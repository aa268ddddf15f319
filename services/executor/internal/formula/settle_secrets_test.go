package formula

import (
	"context"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/secrets/secretstest"
)

// An executor died while node n ran its attempt on this machine (the
// attempt ended there, its output in the attempt's files); the run was
// cancelled since, and the next executor settles the attempt: the tails it
// reads back go into the node's event. settledTails is what that event
// shows, the attempt having run script with runSecrets and mask.
func settledTails(t *testing.T, n events.WorkNode, sec secretstest.Map, script string, runSecrets map[string]string, mask []string) string {
	t.Helper()
	return settle(t, settleCase{node: n, secrets: sec, attempt: hostexec.Attempt{Command: hostexec.Command{Script: script, Secrets: runSecrets, Mask: mask}}})
}

// settleCase is a node whose attempt an executor left, and the executor
// that settles it.
type settleCase struct {
	node    events.WorkNode
	secrets secretstest.Map
	outputs *eventbustest.MemoryBucket[events.OutputRecord] // the executor's outputs store (none when nil)
	attempt hostexec.Attempt                                // what the executor that died ran (its env: the node's plain env)
}

// settle is what the node's settled event shows: its tails, error and
// reason.
func settle(t *testing.T, c settleCase) string {
	t.Helper()
	h := newHarness()
	h.x.Hosts = runners{r: localexec.Local{}}
	h.x.Secrets = c.secrets
	if c.outputs != nil {
		h.x.Outputs = c.outputs
	}
	a := c.attempt
	a.ID, a.Env = "w1.1.create.f.n.1.run", plainEnv(c.node.Env)
	if _, err := (localexec.Local{}).RunAttempt(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if _, err := h.records.Put(context.Background(), h.key(dag.OpCreate, "n"), Record{Status: dag.NodeRunning, Attempt: 1, Generation: 1, GenAttempts: 1, SpecHash: "h-n"}, 0); err != nil {
		t.Fatal(err)
	}
	h.snapshot(events.RunSnapshot{Generation: 1, Status: dag.WorkflowCancelled})
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, c.node)); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, e := range h.bus.out.Stored() {
		if p, ok := e.Payload.(*events.NodeEvent); ok {
			all.WriteString(p.StdoutTail + p.StderrTail + p.Error + p.Reason)
		}
	}
	return all.String()
}

// The lines of a secret file are hidden in a settled attempt's output as
// in a followed one's. Before, a settle masked only the node's env
// secrets: the key's lines were in the event whole.
func TestASettledAttemptHidesItsSecretFiles(t *testing.T) {
	const key = "-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
	n := node("n", "cat /etc/app/tls.key", 1)
	n.Env = map[string]dag.EnvValue{"GANTRY_ATTEMPTS": dag.Text(t.TempDir())}
	n.Files = []events.WorkFile{{Path: "/etc/app/tls.key", Kind: events.FileSecret, Secret: "app_key", Mode: "0600"}}
	got := settledTails(t, n, secretstest.Map{"app_key": key}, "echo "+key+"; echo "+key+" >&2", nil, []string{key})
	if strings.Contains(got, key) || !strings.Contains(got, "***") {
		t.Errorf("the settled node event shows the secret file's content: %q", got)
	}
}

// The tail a settle reads is the last MaxTail bytes of the output: when
// that cut falls inside a secret, the secret's end is hidden too. Before,
// only whole copies were: the end of the password was in the event.
func TestASettledTailCutInsideASecretHidesItsEnd(t *testing.T) {
	const secret = "hunter2-VERY-SECRET-db-password-0123456789"
	n := node("n", "x", 1)
	n.Env = map[string]dag.EnvValue{"GANTRY_ATTEMPTS": dag.Text(t.TempDir()), "DB_PASS": dag.SecretRef("db_pass")}
	script := `printf '%s' "$DB_PASS"; head -c 4064 /dev/zero | tr '\0' x` // the last 4096 bytes start 10 bytes into the secret
	got := settledTails(t, n, secretstest.Map{"db_pass": secret}, script, map[string]string{"DB_PASS": secret}, nil)
	if strings.Contains(got, secret[10:]) || !strings.HasPrefix(got, "***xxx") {
		t.Errorf("the settled node event shows the end of the secret: %q", got[:min(len(got), 80)])
	}
}

// A secret that cannot be read at the settle (removed since the attempt
// ran) cannot be hidden: the output is not shown at all. The attempt is
// found all the same (its files are where the node's plain environment
// says): before, a secret not readable dropped the whole environment, and
// an attempt that had run and ended was reported "cancelled: it had not
// started on the host".
func TestASettledAttemptWhoseSecretsAreGoneShowsNoOutput(t *testing.T) {
	const secret = "s3cr3t-value-of-the-api-token"
	n := node("n", "x", 1)
	n.Env = map[string]dag.EnvValue{"GANTRY_ATTEMPTS": dag.Text(t.TempDir()), "TOKEN": dag.SecretRef("token")}
	got := settledTails(t, n, secretstest.Map{}, `echo "token: $TOKEN"; echo done`, map[string]string{"TOKEN": secret}, nil)
	if strings.Contains(got, secret) || strings.Contains(got, "done") {
		t.Errorf("the settled node event shows output it cannot hide secrets in: %q", got)
	}
	if !strings.Contains(got, "it ended on the host while no executor followed it") {
		t.Errorf("the settled node event says %q, want that it ended on the host", got)
	}
}

// A settle of a node whose command reads an output, in a cancelled run
// (a dispatch that starts nothing): the outputs are read within the
// settle's own time. Before, they were read within the attempt's stop,
// which such a dispatch does not have: the executor panicked ("cannot
// create context from nil parent"), at every redelivery.
func TestASettleOfANodeReadingOutputsInACancelledRun(t *testing.T) {
	store := &eventbustest.MemoryBucket[events.OutputRecord]{}
	if _, err := store.Put(context.Background(), events.OutputKey("w", "f", "gen"), events.OutputRecord{WorkflowID: "w1", Values: map[string]string{"port": "8080"}}, 0); err != nil {
		t.Fatal(err)
	}
	n := node("n", "echo port "+dag.OutputRef{Formula: "f", Node: "gen", Name: "port"}.Marker(), 1)
	n.Env = map[string]dag.EnvValue{"GANTRY_ATTEMPTS": dag.Text(t.TempDir())}
	got := settle(t, settleCase{node: n, secrets: secretstest.Map{}, outputs: store, attempt: hostexec.Attempt{Command: hostexec.Command{Script: "echo port 8080"}}})
	if !strings.Contains(got, "port 8080") {
		t.Errorf("settled tails %q, want the output shown", got)
	}
}

// A node's own secret outputs (what it wrote to $GANTRY_OUTPUT) are
// hidden in its tails after a run; a settle of an attempt that succeeded
// reads them back, stores them as the run would have (a dependent reads
// them; before, it failed "output missing" after the settle), and hides
// their values. Before, the generated password was in the event.
func TestASettledAttemptKeepsAndHidesItsOwnOutputs(t *testing.T) {
	const pw = "generated-Pa55word-0123456789"
	n := node("n", "x", 1)
	n.Env = map[string]dag.EnvValue{"GANTRY_ATTEMPTS": dag.Text(t.TempDir())}
	n.Outputs = []dag.Output{{Name: "pw", Secret: true}, {Name: "port"}}
	store := &eventbustest.MemoryBucket[events.OutputRecord]{}
	got := settle(t, settleCase{node: n, secrets: secretstest.Map{}, outputs: store,
		attempt: hostexec.Attempt{Command: hostexec.Command{Script: `printf 'pw=%s\nport=8080\n' ` + pw + ` >> "$GANTRY_OUTPUT"; echo "admin password: ` + pw + `"`}, Output: true}})
	if strings.Contains(got, pw) || !strings.Contains(got, "admin password: ***") {
		t.Errorf("the settled node event shows %q, want the node's own secret output masked", got)
	}
	rec, _, err := store.Get(context.Background(), events.OutputKey("w", "f", "n"))
	if err != nil || rec.Values["port"] != "8080" || rec.Values["pw"] != pw {
		t.Errorf("the outputs kept: %+v %v, want port 8080 and the password", rec.Values, err)
	}
}

// A settled attempt that did not succeed, of a node that writes secret
// outputs, shows no output: what it wrote is not read back, so not hidden.
func TestAFailedSettledAttemptWithSecretOutputsShowsNoOutput(t *testing.T) {
	const pw = "generated-Pa55word-0123456789"
	n := node("n", "x", 1)
	n.Env = map[string]dag.EnvValue{"GANTRY_ATTEMPTS": dag.Text(t.TempDir())}
	n.Outputs = []dag.Output{{Name: "pw", Secret: true}}
	got := settle(t, settleCase{node: n, secrets: secretstest.Map{}, outputs: &eventbustest.MemoryBucket[events.OutputRecord]{},
		attempt: hostexec.Attempt{Command: hostexec.Command{Script: `echo "pw=` + pw + `" >> "$GANTRY_OUTPUT"; echo "admin password: ` + pw + `"; exit 3`}, Output: true}})
	if strings.Contains(got, pw) || strings.Contains(got, "admin password") {
		t.Errorf("the settled node event shows %q, want no output", got)
	}
}
