package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reconcile refuses, before it asks anything of a server, a composition
// that chooses what runs itself, or is invalid.
func TestReconcileRefusesWhatItCannotReconcile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const base = "name: r\nhosts: {h: {transport: local}}\nformulas:\n  - id: a\n    server: h\n    nodes: [{name: n, run: 'true'}]\n"
	for name, tc := range map[string]struct{ doc, want string }{
		"targets":   {base + "targets: [a]\n", "targets: reconcile chooses the targets itself"},
		"reset":     {base + "reset: true\n", "reset: reconcile runs only what drifted"},
		"operation": {base + "operation: delete\n", "operation: reconcile runs a create, not delete"},
		"invalid":   {base + "retry: {max_attempts: 0}\n", "is not a valid composition"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(dir, name+".yaml")
			os.WriteFile(p, []byte(tc.doc), 0o644)
			// No server listens here: a refusal must come first.
			code, out, errOut := run(t, "reconcile", p, "--server", "nats://127.0.0.1:1", "--timeout", "200ms")
			if code != ExitFailed || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, want 1 and %q\n%s%s", code, tc.want, out, errOut)
			}
		})
	}
}
