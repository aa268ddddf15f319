package formula

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	"github.com/gantry-dev/gantry/pkg/secrets/secretstest"
)

// envHost keeps the environment each command was given.
type envHost struct {
	*host
	mu          sync.Mutex
	env, secret []map[string]string
}

func (h *envHost) run(ctx context.Context, cmd hostexec.Attempt, settle bool) (hostexec.Result, error) {
	h.mu.Lock()
	h.env, h.secret = append(h.env, cmd.Env), append(h.secret, cmd.Secrets)
	h.mu.Unlock()
	return h.host.run(ctx, cmd, settle)
}

func secretNode(attempts int, env map[string]dag.EnvValue) events.WorkNode {
	n := node("n", "psql", attempts)
	n.Env = env
	return n
}

// The executor reads a node's secrets itself and hands their values to
// the host apart from the plain env (kept out of argv, masked in output).
func TestSecretsAreResolvedOnTheWorker(t *testing.T) {
	t.Parallel()
	h := newHarness()
	eh := &envHost{host: h.host}
	h.x.Hosts = runners{r: fake{eh}}
	h.x.Secrets = secretstest.Map{"db_pass": "s3cr3t"}
	d := dispatch(dag.OpCreate, 1, secretNode(1, map[string]dag.EnvValue{"PORT": dag.Text("5432"), "DB_PASS": dag.SecretRef("db_pass")}))
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if len(eh.env) != 1 || eh.env[0]["PORT"] != "5432" || len(eh.env[0]) != 1 || eh.secret[0]["DB_PASS"] != "s3cr3t" || len(eh.secret[0]) != 1 {
		t.Fatalf("env %v, secrets %v", eh.env, eh.secret)
	}
}

// A secret that cannot be had fails the node at once, naming the secret:
// nothing runs, no attempt is retried.
func TestAMissingSecretFailsTheNodeBeforeAnythingRuns(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		secrets Secrets
		env     map[string]dag.EnvValue
		want    string
	}{
		"missing":        {secretstest.Map{}, map[string]dag.EnvValue{"DB_PASS": dag.SecretRef("db_pass")}, `secret "db_pass": not found`},
		"no secrets dir": {nil, map[string]dag.EnvValue{"DB_PASS": dag.SecretRef("db_pass")}, `secret "db_pass": no secrets directory on this worker: start it with --secrets-dir`},
		// A dispatch that did not come through the planner's validation.
		"path as name": {secretstest.Map{}, map[string]dag.EnvValue{"X": dag.SecretRef("../../etc/shadow")}, `secret "../../etc/shadow": not a secret name (letters, digits`},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness()
			h.x.Secrets = tc.secrets
			if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, secretNode(3, tc.env))); err != nil {
				t.Fatal(err)
			}
			if ran := h.host.scripts(); len(ran) != 0 {
				t.Errorf("ran %q", ran)
			}
			got := h.stored()
			want := []string{"f running", "n running 1", "n failed 1: nothing ran: its secrets could not be read: " + tc.want, "f failed: node(s) failed: n"}
			if len(got) != 4 || !slices.Equal(got[:2], want[:2]) || !strings.HasPrefix(got[2], want[2]) || got[3] != want[3] {
				t.Errorf("stored %q\nwant %q", got, want)
			}
			if r := h.record(dag.OpCreate, "n"); r.Status != dag.NodeFailed || r.GenAttempts != 1 {
				t.Errorf("record %+v", r)
			}
		})
	}
}

// A script that, with its environment (its outputs in), is longer than a
// host's shell takes as one argument fails the node before anything runs,
// saying so, and is not retried: the host would refuse it each time
// ("argument list too long", which a health gate took for a failed
// check).
func TestAScriptTooLargeFailsBeforeAnythingRuns(t *testing.T) {
	t.Parallel()
	h := newHarness()
	big := strings.Repeat("x", dag.MaxScript)
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, secretNode(3, map[string]dag.EnvValue{"BIG": dag.Text(big)}))); err != nil {
		t.Fatal(err)
	}
	if ran := h.host.scripts(); len(ran) != 0 {
		t.Errorf("ran %d scripts", len(ran))
	}
	got := h.stored()
	if len(got) != 4 || !strings.HasPrefix(got[2], "n failed 1: nothing ran: the run script with its environment (its outputs in) is ") ||
		!strings.Contains(got[2], "more than the 120 KiB a script may be") {
		t.Errorf("stored %q", got)
	}
	if r := h.record(dag.OpCreate, "n"); r.Status != dag.NodeFailed || r.GenAttempts != 1 {
		t.Errorf("record %+v: want failed after one attempt", r)
	}
}

// An attempt that started nothing on its host (here its host is
// unreachable) says so on its events (NotStarted: the per-host projection
// keeps what is in place) and in the node's record (NeverStarted: a later
// submission still skips what an earlier run put in place); one that ran
// says neither.
func TestAnAttemptThatStartedNothingSaysSo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		unreachable bool
	}{{"unreachable", true}, {"ran", false}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness()
			if c.unreachable {
				h.x.Hosts = runners{err: errors.New("no key for user deploy")}
			}
			if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "ok", 1))); err != nil {
				t.Fatal(err)
			}
			var said []bool
			for _, e := range h.bus.out.Stored() {
				if ne, ok := e.Payload.(*events.NodeEvent); ok {
					said = append(said, ne.NotStarted)
				}
			}
			if want := []bool{c.unreachable, c.unreachable}; !slices.Equal(said, want) {
				t.Errorf("the node's events say not started %v, want %v", said, want)
			}
			if r := h.record(dag.OpCreate, "n"); r.NeverStarted != c.unreachable {
				t.Errorf("record %+v: never started %t, want %t", r, r.NeverStarted, c.unreachable)
			}
		})
	}
}

// A host this worker refuses (transport local without --allow-local) fails
// its nodes at once, saying so, without calling it unreachable.
func TestRefusedLocalHost(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.x.Hosts = runners{err: fmt.Errorf("%w: start it with --allow-local", transport.ErrLocalNotAllowed)}
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "ok", 3))); err != nil {
		t.Fatal(err)
	}
	want := []string{"f running", "n running 1", "n failed 1: nothing ran: transport local is not allowed on this worker: start it with --allow-local", "f failed: node(s) failed: n"}
	if got := h.stored(); !slices.Equal(got, want) {
		t.Errorf("stored %q\nwant %q", got, want)
	}
}
