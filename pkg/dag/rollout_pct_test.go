package dag_test

import (
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// max_failed "10%" of 5 instances is 0.5 instance, rounded down: one
// failure (20%) is past 10%, and the rollout stops (it went on: the
// percentage was rounded up to 1, as batch's is).
func TestMaxFailedPercentRoundsDown(t *testing.T) {
	p := rolloutPlan(t, 5, `{"batch":1,"max_failed":"10%"}`, dag.OnFailureStop, false)
	log, _ := drive(p, map[string]bool{"app-h1": true})
	if slices.Contains(log, "start app-h2") {
		t.Fatalf("1 of 5 instances (20%%) failed with max_failed 10%%, yet the rollout went on: %q", log)
	}
}
