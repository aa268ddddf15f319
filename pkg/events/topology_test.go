package events_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
)

func TestStreamOf(t *testing.T) {
	for subject, want := range map[string]string{
		events.WorkflowLifecycle("w1"):    events.StreamEvents,
		events.HostLifecycle("h1"):        events.StreamEvents,
		events.HostHealth("h1"):           events.StreamEvents,
		events.HostDispatch("h1", ""):     events.StreamDispatch,
		events.HostDispatch("h1", "eu-1"): events.StreamDispatch,
		events.HostGate("h1"):             events.StreamGates,
		events.HostLogs("h1", "n1"):       events.StreamLogs,
		"status.planner":                  "",
	} {
		if got := events.StreamOf(subject); got != want {
			t.Errorf("StreamOf(%s) = %q, want %q", subject, got, want)
		}
	}
}
