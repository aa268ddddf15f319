package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

func localEnvComp() *dag.Composition {
	return &dag.Composition{Name: "local-env", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "a", Server: "me", Nodes: []dag.Node{{Name: "env", Run: "env | sort",
			Env: map[string]dag.EnvValue{"APP_MODE": dag.Text("blue"), "DB_PASS": dag.SecretRef("db_pass")}}}}}}
}

// A worker started without --allow-local refuses transport local, and says
// how to allow it.
func TestLocalTransportNeedsAllowLocal(t *testing.T) {
	s := newStack(t, stackOptions{refuseLocal: true})
	c := localEnvComp()
	c.Formulas[0].Nodes[0].Env = nil
	id := s.mustSubmit(c)
	doc := s.wait(id, 30*time.Second)
	if doc.Status != dag.WorkflowFailed {
		t.Fatalf("workflow %s, want failed", doc.Status)
	}
	var errText string
	for _, e := range s.events(id) {
		if e.node == "env" && e.status == "failed" {
			errText = e.err
		}
	}
	if !strings.Contains(errText, "transport local is not allowed") || !strings.Contains(errText, "--allow-local") {
		t.Fatalf("node error %q, want the hint", errText)
	}
	if lines := s.logLines(id); len(lines) != 0 {
		t.Errorf("something ran: %q", lines)
	}
}

// With --allow-local, a local command sees a small, clean environment:
// PATH, HOME, LANG, USER and its own env, nothing of the executor's.
func TestLocalTransportCleanEnvironment(t *testing.T) {
	t.Setenv("GANTRY_SSH_KEY", "/executor/only/id_ed25519")
	t.Setenv("NATS_NKEY", "/executor/only/identity.nk")
	t.Setenv("EXECUTOR_SENTINEL", "executor-only-value")
	dir := t.TempDir()
	secret := secretValue(t)
	if err := os.WriteFile(filepath.Join(dir, "db_pass"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{secretsDir: dir})
	id := s.mustSubmit(localEnvComp())
	if doc := s.wait(id, 30*time.Second); doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s", doc.Status)
	}
	var names []string
	for _, l := range s.logLines(id) {
		line := strings.TrimPrefix(l, "env stdout ")
		if strings.Contains(line, "executor-only") || strings.Contains(line, secret) {
			t.Errorf("the command saw %q", line)
		}
		if k, _, ok := strings.Cut(line, "="); ok {
			names = append(names, k)
		}
	}
	allowed := []string{"PATH", "HOME", "LANG", "USER", "PWD", "SHLVL", "_", "APP_MODE", "DB_PASS"}
	for _, k := range names {
		if !slices.Contains(allowed, k) {
			t.Errorf("the command saw the executor's %s", k)
		}
	}
	for _, k := range []string{"PATH", "HOME", "APP_MODE", "DB_PASS"} {
		if !slices.Contains(names, k) {
			t.Errorf("the command did not see %s; it saw %q", k, names)
		}
	}
	if lines := s.logLines(id); !slices.Contains(lines, "env stdout DB_PASS=***") {
		t.Errorf("DB_PASS not masked in %q", lines)
	}
}
