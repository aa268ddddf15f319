package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/hostdrift"
	"github.com/gantry-dev/gantry/pkg/events"
)

// What a host said (a check's error, a host name) is printed by drift and
// reconcile with control characters escaped.
func TestHostDriftEscapesWhatHostsSay(t *testing.T) {
	t.Parallel()
	rep := hostdrift.Merge("wf"+hostile, "w1", []hostdrift.Item{
		{Host: "h1" + hostile, Formula: "a", Node: "n", Drift: hostdrift.Changed, Reason: hostile,
			Files: []hostdrift.File{{Path: "/etc/" + hostile, State: hostdrift.Changed}}},
		{Host: "h2", Formula: "a", Node: "m", Drift: hostdrift.Unreachable, Reason: hostile},
	}, &events.DriftReport{Items: []events.DriftItem{{Host: hostile, Formula: "gone", Node: "x", Drift: events.DriftOrphaned}}})
	var table, recon strings.Builder
	printHostDrift(&table, &rep)
	pick := printHostReconcile(&recon, &rep)
	for what, out := range map[string]string{"drift": table.String(), "reconcile": recon.String()} {
		assertTermSafe(t, what, out, false)
		if !strings.Contains(out, shown) {
			t.Errorf("%s: what the host said is not shown escaped:\n%s", what, out)
		}
	}
	if len(pick.drifted) != 1 || pick.unreachable != 1 || len(pick.rerun) != 0 {
		t.Errorf("reconcile picked %+v", pick)
	}
	if err := hostDriftExit(&rep); err == nil || err.(*exitError).code != ExitChanges {
		t.Errorf("exit %v, want %d", err, ExitChanges)
	}
}

// drift --records that finds drift exits 4 saying so in its last line
// (it printed a bare "gantry: "); one that finds none exits 0.
func TestDriftRecordsExitSaysWhy(t *testing.T) {
	t.Parallel()
	comp := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(comp, []byte("name: wf\nhosts: {h1: {transport: local}}\nformulas:\n  - id: a\n    server: h1\n    nodes: [{name: n, run: 'true'}]\n"), 0o644)
	missing := events.DriftReport{Workflow: "wf", Counts: map[string]int{events.DriftMissing: 1},
		Items: []events.DriftItem{{Host: "h1", Formula: "a", Node: "n", Drift: events.DriftMissing}}}
	url, _ := fakeBus(t, map[string]answer{events.StateDrift: {body: missing}})
	code, out, errOut := run(t, "drift", comp, "--records", "--server", url, "--timeout", "5s")
	if code != ExitChanges || strings.TrimSpace(errOut) != "gantry: the records differ from the composition" {
		t.Fatalf("exit %d, stderr %q (stdout %q), want 4 and why", code, errOut, out)
	}
	ok := events.DriftReport{Workflow: "wf", Counts: map[string]int{events.DriftOK: 1},
		Items: []events.DriftItem{{Host: "h1", Formula: "a", Node: "n", Drift: events.DriftOK}}}
	url, _ = fakeBus(t, map[string]answer{events.StateDrift: {body: ok}})
	if code, _, errOut := run(t, "drift", comp, "--records", "--server", url, "--timeout", "5s"); code != 0 || errOut != "" {
		t.Fatalf("no drift: exit %d, stderr %q, want 0 and nothing", code, errOut)
	}
}
