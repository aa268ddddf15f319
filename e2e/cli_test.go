package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
)

// buildGantry builds the CLI once per test binary.
func buildGantry(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gantry")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/gantry").CombinedOutput()
	if err != nil {
		t.Fatalf("build gantry: %v\n%s", err, out)
	}
	return bin
}

// gantry submit --watch streams a run and exits 0 only when it succeeded;
// status -o json prints the document whose top-level status is the state.
func TestCLISubmitWatchStatus(t *testing.T) {
	s := newStack(t, stackOptions{})
	bin := buildGantry(t)
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(ok, []byte("name: ok\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: echo fine}]\n"), 0o644)
	os.WriteFile(bad, []byte("name: bad\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'echo broken >&2; exit 4'}]\n  - id: b\n    server: me\n    depends_on: [a]\n    nodes: [{name: m, run: 'true'}]\n"), 0o644)
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, isExit := err.(*exec.ExitError); isExit {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	code, out := run("submit", "-q", ok)
	if code != 0 || !regexp.MustCompile(`^[0-9a-f-]{36}\n$`).MatchString(out) {
		t.Fatalf("submit -q: exit %d, want only the id\n%q", code, out)
	}
	if code, out = run("ping", "--service", "gantry-planner", "--service", "gantry-state-store"); code != 0 || out != "ok\n" {
		t.Fatalf("ping: exit %d\n%s", code, out)
	}
	if code, out = run("ping", "--service", "gantry-nothing", "--timeout", "500ms"); code != 3 || !strings.Contains(out, "no gantry-nothing service answers") {
		t.Fatalf("ping of a missing service: exit %d\n%s", code, out)
	}
	code, out = run("submit", ok, "--watch")
	if code != 0 || !strings.Contains(out, "a/n") || !strings.Contains(out, "workflow ok SUCCEEDED") {
		t.Fatalf("ok run: exit %d\n%s", code, out)
	}
	code, out = run("submit", bad, "--watch")
	if code != 1 || !strings.Contains(out, "failed: exit status 4") || !strings.Contains(out, "stderr: broken") ||
		!strings.Contains(out, "b                            blocked (blocked by a)") || !strings.Contains(out, "workflow bad FAILED") {
		t.Fatalf("failing run: exit %d\n%s", code, out)
	}
	id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]
	// The watch reads the event stream; the state-store's projection may be
	// a few events behind it, so status is polled (bounded) until it agrees.
	var doc map[string]any
	for i := 0; i < 50; i++ {
		code, out = run("status", id, "-o", "json")
		doc = nil
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || doc["status"] == "failed" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 0 || doc["status"] != "failed" {
		t.Fatalf("status -o json: exit %d\n%s", code, out)
	}
	if code, out = run("watch", id); code != 1 || !strings.Contains(out, "workflow bad FAILED") {
		t.Fatalf("watch of a finished failed workflow: exit %d\n%s", code, out)
	}
	if code, out = run("list"); code != 0 || strings.Count(out, "\n") != 4 { // header and 3 workflows
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	// Each composition has its own rows: bad's failed a/n does not hide
	// ok's, in place (ok's second run skipped it as already done, or ran it
	// again when it was submitted before the first run ended).
	code, out = run("state", "--host", "me")
	for _, row := range []string{`me +bad +a +n +failed +create`, `me +bad +b +m +blocked +create .* no +- +` + id, `me +ok +a +n +(succeeded|skipped) +create .* yes +- `} {
		if code != 0 || !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("state: exit %d, no row %q\n%s", code, row, out)
		}
	}
	t.Logf("gantry state --host me:\n%s", out)
	if code, out = run("retry", id); code != 0 || !strings.Contains(out, id+": running (generation 2)") {
		t.Fatalf("retry: exit %d\n%s", code, out)
	}
	// The watch follows the retried run: it shows the first run's end and
	// returns at the second's.
	if code, out = run("watch", id); code != 1 || !strings.Contains(out, "workflow bad FAILED: ") || !strings.Contains(out, "workflow bad FAILED (run 2)") {
		t.Fatalf("watch after retry: exit %d\n%s", code, out)
	}
	if code, out = run("pause", id); code != 1 || !strings.Contains(out, "only a running workflow can be paused") {
		t.Fatalf("pause of a failed workflow: exit %d\n%s", code, out)
	}
	if code, out = run("cancel", "nonexistent-id"); code != 1 || !strings.Contains(out, "no workflow nonexistent-id") {
		t.Fatalf("cancel of an unknown workflow: exit %d\n%s", code, out)
	}
	if code, out = run("drift", bad, "--records"); code != 4 || !strings.Contains(out, "bad: 0 ok, 0 changed, 2 missing, 0 orphaned") {
		t.Fatalf("drift: exit %d\n%s", code, out)
	}
	if code, out = run("state", "--rebuild", "--check"); code != 0 || !strings.Contains(out, "0 differ") {
		t.Fatalf("state --rebuild --check: exit %d\n%s", code, out)
	}
	if code, out = run("status", "nonexistent-id"); code != 1 || !strings.Contains(out, "no workflow nonexistent-id") {
		t.Fatalf("status of an unknown id: exit %d\n%s", code, out)
	}
	if code, out = run("submit", filepath.Join(dir, "missing.yaml")); code != 3 {
		t.Fatalf("missing file: exit %d\n%s", code, out)
	}
}
