package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/events/eventstest"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// logStream is a server with the gantry streams, and a way to publish a
// node's output line (on its own subject, or on another node's: refused).
func logStream(t *testing.T) (*natstest.Server, func(text string, misrouted bool)) {
	t.Helper()
	ns := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin, _ := jetstream.New(ns.Connect(busauth.Admin))
	if err := eventbus.Ensure(ctx, admin, events.Executor, 1); err != nil {
		t.Fatal(err)
	}
	ref := events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "f", Host: "h1", Node: "n", Operation: dag.OpCreate, Generation: 1}
	seq := int64(0)
	return ns, func(text string, misrouted bool) {
		t.Helper()
		seq++
		b, _, err := eventstest.Marshal("test", &events.LogLine{Ref: ref, Attempt: 1, Stream: events.Stdout, Seq: seq, Line: text})
		if err != nil {
			t.Fatal(err)
		}
		subject := events.HostLogs("h1", "n")
		if misrouted {
			subject = events.HostLogs("h1", "other")
		}
		if _, err := admin.Publish(context.Background(), subject, b); err != nil {
			t.Fatal(err)
		}
	}
}

// lines reads the text of the output lines an iterator gives.
func lines(t *testing.T, it func(func(*client.Message, error) bool)) []string {
	t.Helper()
	var got []string
	for m, err := range it {
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		var l events.LogLine
		if err := events.DecodeData(m.Envelope, &l); err != nil {
			t.Fatal(err)
		}
		got = append(got, l.Line)
	}
	return got
}

// TestFeedHistory: History gives what the stream held when the feed
// opened, and ends, though the last of it is refused and more comes after;
// the feed goes on with what came since.
func TestFeedHistory(t *testing.T) {
	ns, publish := logStream(t)
	for i := range 3 {
		publish(fmt.Sprint("line ", i), false)
	}
	publish("forged", true)
	viewer := client.New(ns.Connect(events.Viewer), 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	skipped := 0
	feed, err := viewer.Follow(ctx, client.FollowOptions{
		Stream: events.StreamLogs, Subjects: []string{events.HostLogs("h1", "*")}, Since: time.Now().Add(-time.Hour),
		Skipped: func(*client.Message, error) { skipped++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	publish("after it opened", false)
	start := time.Now()
	if got := lines(t, feed.History(3*time.Second)); fmt.Sprint(got) != "[line 0 line 1 line 2]" || skipped != 1 {
		t.Errorf("History: %q (%d skipped), want the three lines held when the feed opened", got, skipped)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("History took %v: it waited past what the stream held", took)
	}
	if m, err := feed.NextWithin(3 * time.Second); err != nil || m.Envelope == nil {
		t.Errorf("the feed after its history: %v", err)
	}

	empty, err := viewer.Follow(ctx, client.FollowOptions{Stream: events.StreamLogs, Subjects: []string{events.HostLogs("h2", "*")}, Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got := lines(t, empty.History(3*time.Second)); len(got) != 0 {
		t.Errorf("History of nothing: %q", got)
	}
}

// TestFeedDrain: Drain gives what the stream holds now, each time again
// with what came since, and ends at once when nothing did.
func TestFeedDrain(t *testing.T) {
	ns, publish := logStream(t)
	publish("a", false)
	publish("b", false)
	viewer := client.New(ns.Connect(events.Viewer), 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	feed, err := viewer.Follow(ctx, client.FollowOptions{Stream: events.StreamLogs, Subjects: []string{events.HostLogs("h1", "*")}, Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	drain := func(want string) {
		t.Helper()
		start := time.Now()
		if got := fmt.Sprint(lines(t, feed.Drain(ctx))); got != want {
			t.Errorf("Drain: %s, want %s", got, want)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Drain took %v", took)
		}
	}
	drain("[a b]")
	drain("[]")
	publish("c", false)
	publish("forged", true)
	publish("d", false)
	drain("[c d]")
	drain("[]")
}

// A feed that starts after what its subjects hold (from a time, or new
// messages only) has caught up at once, and drains what comes after its
// start: what came before is not the feed's to wait for.
func TestFeedStartingAfterWhatIsHeld(t *testing.T) {
	ns, publish := logStream(t)
	publish("old", false)
	viewer := client.New(ns.Connect(events.Viewer), 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, o := range []client.FollowOptions{
		{Stream: events.StreamLogs, Subjects: []string{events.HostLogs("h1", "*")}, Since: time.Now().Add(time.Second)},
		{Stream: events.StreamLogs, Subjects: []string{events.HostLogs("h1", "*")}},
		{Stream: events.StreamLogs},
	} {
		feed, err := viewer.Follow(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if got := lines(t, feed.Drain(ctx)); len(got) != 0 {
			t.Errorf("%+v: Drain %q, want nothing", o, got)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%+v: Drain took %v: it waited for what came before the feed's start", o, took)
		}
		if !feed.CaughtUp(ctx) {
			t.Errorf("%+v: not caught up", o)
		}
		feed.Stop()
	}
}
