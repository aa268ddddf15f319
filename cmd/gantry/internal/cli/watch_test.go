package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// After a workflow retry, watch counts the attempts of the new run against
// max_attempts, never "attempt 4 of 3".
func TestWatchAttemptOfMax(t *testing.T) {
	t.Parallel()
	ref := events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "f", Node: "n", Host: "h1", Operation: dag.OpCreate, Generation: 2}
	for _, c := range []struct {
		ev   events.NodeEvent
		want string
	}{
		{events.NodeEvent{Ref: ref, Status: dag.NodeRunning, Run: events.Run{Attempt: 5}, GenAttempt: 2, MaxAttempts: 3}, "(attempt 2 of 3)"},
		{events.NodeEvent{Ref: ref, Status: dag.NodeFailed, Run: events.Run{Attempt: 4, ExitCode: new(int)}, GenAttempt: 1, MaxAttempts: 3, WillRetry: true}, "(attempt 1 of 3, will retry)"},
	} {
		env, err := events.NewAt("x", "test", time.Now(), &c.ev)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		printEvent(&b, env)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("printed %q, want %q", b.String(), c.want)
		}
	}
}

// A formula cancelled under on_failure stop was never blocked: watch says
// it did not start because another failed.
func TestWatchCancelledIsNotBlocked(t *testing.T) {
	t.Parallel()
	ref := events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "y", Host: "h1", Operation: dag.OpCreate, Generation: 1}
	for st, want := range map[dag.FormulaState]string{dag.FormulaCancelled: "(not started: a failed)", dag.FormulaBlocked: "(blocked by a)"} {
		now := time.Now()
		env, err := events.NewAt("x", "test", now, &events.FormulaEvent{Ref: ref, Status: st, Blocker: "a", Run: events.Run{EndedAt: &now}})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		printEvent(&b, env)
		if !strings.Contains(b.String(), want) {
			t.Errorf("%s: printed %q, want %q", st, b.String(), want)
		}
	}
}

// An -o the command cannot print is a usage error naming it, before any
// connection is tried (no server here).
func TestUnknownOutputFormatRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"list", "-o", "toml", "--server", "nats://127.0.0.1:1"}, {"status", "x", "-o", "xml", "--server", "nats://127.0.0.1:1"},
		{"state", "-o", "xml", "--server", "nats://127.0.0.1:1"}, {"drift", examples + "hello.yaml", "-o", "xml", "--server", "nats://127.0.0.1:1"}, {"auth", "permissions", "-o", "toml"}} {
		code, out, errOut := run(t, args...)
		bad := args[slices.Index(args, "-o")+1]
		if code != ExitUsage || !strings.Contains(errOut, "unknown -o \""+bad+"\"") || out != "" {
			t.Errorf("%v: exit %d\nstdout %q\nstderr %q", args, code, out, errOut)
		}
	}
}

// A composition over the size limit is refused with the rule, not with
// NATS's "maximum payload exceeded" (no server needed).
func TestOversizeCompositionRefused(t *testing.T) {
	t.Parallel()
	big := filepath.Join(t.TempDir(), "big.yaml")
	doc := "name: big\nhosts: {h: {transport: local}}\nformulas:\n  - id: a\n    server: h\n    nodes: [{name: n, run: \"true\"}]\n# " + strings.Repeat("x", 1<<20) + "\n"
	if err := os.WriteFile(big, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"submit", big}, {"drift", big}} {
		code, _, errOut := run(t, append(args, "--server", "nats://127.0.0.1:1")...)
		if code != ExitFailed || !strings.Contains(errOut, "over the 1048576-byte (1 MiB) limit") || strings.Contains(errOut, "payload") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}
