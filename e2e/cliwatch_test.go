package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
)

// watch names an id no workflow has at once, follows a workflow by the
// start of its id, honours --timeout, and a check run that finds changes
// exits 4.
func TestCLIWatchIDsTimeoutAndCheck(t *testing.T) {
	s := newStack(t, stackOptions{})
	bin := buildGantry(t)
	dir := t.TempDir()
	slow := filepath.Join(dir, "slow.yaml")
	check := filepath.Join(dir, "check.yaml")
	os.WriteFile(slow, []byte("name: slow\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'sleep 3'}]\n"), 0o644)
	os.WriteFile(check, []byte("name: drifted\noperation: check\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes:\n      - {name: same, run: 'true', check: 'true'}\n      - {name: differs, run: 'true', check: 'false'}\n"), 0o644)
	run := func(args ...string) (int, string, time.Duration) {
		start := time.Now()
		out, err := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return code, string(out), time.Since(start)
	}
	code, out, _ := run("submit", "-q", slow)
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 36 {
		t.Fatalf("submit: %d %s", code, out)
	}
	if code, out, took := run("watch", "01a2000f-0000-7000-8000-000000000000"); code != 1 || !strings.Contains(out, "no workflow 01a2000f") || took > 10*time.Second {
		t.Fatalf("watch of an unknown id: exit %d after %s\n%s", code, took, out)
	}
	if code, out, took := run("watch", id[:13], "--timeout", "1s"); code != 3 || !strings.Contains(out, "had not ended") || took > 10*time.Second {
		t.Fatalf("watch of a truncated id with --timeout 1s: exit %d after %s\n%s", code, took, out)
	}
	if code, out, _ := run("watch", id[:13]); code != 0 || !strings.Contains(out, "workflow slow SUCCEEDED") {
		t.Fatalf("watch of a truncated id: exit %d\n%s", code, out)
	}
	if code, out, _ := run("submit", check, "--watch"); code != 4 || !strings.Contains(out, "1 node(s) would change") {
		t.Fatalf("check run with a change: exit %d\n%s", code, out)
	}
}
