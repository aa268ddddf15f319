package nodemetrics

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A final state is counted under its operation; a state that is not final
// is not counted.
func TestCount(t *testing.T) {
	blocked := results.WithLabelValues("blocked", "create")
	check := results.WithLabelValues("succeeded", "check")
	create := results.WithLabelValues("succeeded", "create")
	b0, c0, s0 := testutil.ToFloat64(blocked), testutil.ToFloat64(check), testutil.ToFloat64(create)
	Count(dag.NodeBlocked, dag.OpCreate)
	Count(dag.NodeSucceeded, dag.OpCheck)
	Count(dag.NodeRunning, dag.OpCreate)
	Count(dag.NodePending, dag.OpCreate)
	if testutil.ToFloat64(blocked)-b0 != 1 || testutil.ToFloat64(check)-c0 != 1 || testutil.ToFloat64(create)-s0 != 0 {
		t.Errorf("blocked +%g, check succeeded +%g, create succeeded +%g; want +1, +1, +0",
			testutil.ToFloat64(blocked)-b0, testutil.ToFloat64(check)-c0, testutil.ToFloat64(create)-s0)
	}
	if n := testutil.CollectAndCount(results, Name); n != len(Statuses)*len(Operations) {
		t.Errorf("%d series, want every status and operation from 0 (%d)", n, len(Statuses)*len(Operations))
	}
}
