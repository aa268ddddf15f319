package gate

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/secrets/secretstest"
)

// A gate's env reaches its check, with its secrets read on this worker and
// given apart (kept out of argv, masked in output).
func TestGateSecrets(t *testing.T) {
	t.Parallel()
	out := &eventbustest.MemoryOutbox{}
	p := &probe{exits: []int{0}}
	ck, _ := fake(p, out)
	ck.Secrets = secretstest.Map{"api_token": "t0k3n"}
	g := request(time.Second, 3)
	g.Gate.Env = map[string]dag.EnvValue{"URL": dag.Text("http://localhost"), "TOKEN": dag.SecretRef("api_token")}
	if err := ck.Run(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	same(t, "events", describe(out), []string{"1 pass final"})
	if len(p.env) != 1 || p.env[0]["URL"] != "http://localhost" || len(p.env[0]) != 1 || p.secrets[0]["TOKEN"] != "t0k3n" || len(p.secrets[0]) != 1 {
		t.Fatalf("env %v secrets %v", p.env, p.secrets)
	}
}

// A secret that cannot be read fails the gate at its first check, naming
// the secret; no check runs.
func TestGateMissingSecretFailsAtOnce(t *testing.T) {
	t.Parallel()
	out := &eventbustest.MemoryOutbox{}
	p := &probe{exits: []int{0}}
	ck, _ := fake(p, out)
	ck.Secrets = secretstest.Map{}
	g := request(time.Second, 3)
	g.Gate.Env = map[string]dag.EnvValue{"TOKEN": dag.SecretRef("api_token")}
	if err := ck.Run(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	same(t, "events", describe(out), []string{`1 fail final: nothing ran: its secrets could not be read: secret "api_token": not found`})
	if p.calls != 0 {
		t.Errorf("%d checks ran", p.calls)
	}
}
