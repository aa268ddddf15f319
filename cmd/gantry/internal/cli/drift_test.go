package cli

import (
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
