package project

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A node that waited for a slot is announced running (NotStarted, no
// started_at) before its attempt really starts; the running that follows
// for the same attempt carries started_at, and so does its end. The
// node's document must hold it (docs: "A node's started_at and ended_at
// lie inside the time it held its slots"); gantry status shows TOOK "-".
func TestWaitedForASlotKeepsStartedAt(t *testing.T) {
	waiting := events.NodeEvent{Ref: ref, Status: dag.NodeRunning, Run: events.Run{Attempt: 1}, NotStarted: true, SpecHash: "s1",
		Reason: "waiting for a slot of limit group pool (2 running)"}
	n, _ := foldNode(nil, stored(3, 1), &waiting)
	started := events.NodeEvent{Ref: ref, Status: dag.NodeRunning, Run: events.Run{Attempt: 1, StartedAt: sec(5)}, SpecHash: "s1"}
	n, _ = foldNode(n, stored(4, 5), &started)
	done := events.NodeEvent{Ref: ref, Status: dag.NodeSucceeded, Run: events.Run{Attempt: 1, StartedAt: sec(5), EndedAt: sec(8), ExitCode: code(0)}, SpecHash: "s1"}
	n, _ = foldNode(n, stored(5, 8), &done)
	if n.StartedAt == nil || !n.StartedAt.Equal(*sec(5)) {
		t.Fatalf("started_at = %v, want %v (ended_at %v, attempts %d)", n.StartedAt, sec(5), n.EndedAt, n.Attempts)
	}
}
