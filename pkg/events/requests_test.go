package events_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
)

func TestStateRetry(t *testing.T) {
	for in, want := range map[string]string{
		events.StateWorkflow: "state.retry.workflow", events.StateList: "state.retry.list",
		events.StateHost: "state.retry.host", events.StateDrift: "state.retry.drift",
		events.StateRebuild: "", events.SubjectSubmit: "", "workflow.w1.cancel": "",
	} {
		if got := events.StateRetry(in); got != want {
			t.Errorf("StateRetry(%q) = %q, want %q", in, got, want)
		}
	}
}
