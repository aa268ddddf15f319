package services_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/devstack/devstacktest"
	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// maxStoredPerLink is what a chain link (a formula of one node that
// depends on the formula before it) may store in JetStream, over every
// stream and bucket. Its five lifecycle events and its dispatch are the
// contract's; the node's two records, the run's snapshot and the
// projection's three documents (formula, node, node on its host, written
// once per WriteHold) are the rest. docs/performance.md, "What a node
// stores", says why each is kept; the issue's target is 7.
const maxStoredPerLink = 13.0

// maxProjectionPerLink is what the state-store may write per link: its
// three documents, and the checkpoint and workflow summary shared by the
// links of a hold.
const maxProjectionPerLink = 4.0

// chainYAML is a chain of n formulas of one local `true` each, their ids
// starting with prefix (each run its own nodes: none is skipped as done).
func chainYAML(prefix string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nhosts: {me: {transport: local}}\nformulas:\n", prefix)
	for i := range n {
		fmt.Fprintf(&b, "  - id: %s%d\n    server: me\n    nodes: [{name: n, run: \"true\"}]\n", prefix, i)
		if i > 0 {
			fmt.Fprintf(&b, "    depends_on: [{formula: %s%d}]\n", prefix, i-1)
		}
	}
	return b.String()
}

// streamSeqs is each stream's last sequence: how many messages it has
// stored since it was made (deleted ones included).
func streamSeqs(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	seqs := map[string]uint64{}
	ls := js.ListStreams(context.Background())
	for info := range ls.Info() {
		seqs[info.Config.Name] = info.State.LastSeq
	}
	if err := ls.Err(); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// settledSeqs waits until no stream has stored anything for a while
// (the state-store projects behind the run) and returns their sequences.
func settledSeqs(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	last := streamSeqs(t, js)
	for still := 0; still < 3; {
		time.Sleep(300 * time.Millisecond)
		now := streamSeqs(t, js)
		if fmt.Sprint(now) == fmt.Sprint(last) {
			still++
		} else {
			still = 0
		}
		last = now
	}
	return last
}

// runChain runs a chain of n links to its end and returns what each
// stream stored meanwhile.
func runChain(t *testing.T, op *client.Client, js jetstream.JetStream, prefix string, n int) map[string]uint64 {
	t.Helper()
	before := settledSeqs(t, js)
	ctx := context.Background()
	start := time.Now()
	reply, err := op.Submit(ctx, []byte(chainYAML(prefix, n)), nil)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	// The end is read from the stream, not asked of the state-store: a
	// read has the projection written at once.
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	feed, err := op.Follow(fctx, client.FollowOptions{Stream: events.StreamEvents, Subjects: []string{events.WorkflowLifecycle(reply.WorkflowID)}})
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Stop()
	for m, err := range feed.Messages() {
		if err != nil {
			t.Fatalf("chain %s: the feed stopped before the workflow ended: %v", prefix, err)
		}
		var e events.WorkflowEvent
		if events.DecodeData(m.Envelope, &e) == nil && e.Status.Terminal() {
			if e.Status != dag.WorkflowSucceeded {
				t.Fatalf("chain %s ended %s", prefix, e.Status)
			}
			break
		}
	}
	t.Logf("chain %s: %d links in %s", prefix, n, time.Since(start).Round(time.Millisecond))
	after := settledSeqs(t, js)
	delta := map[string]uint64{}
	for name, seq := range after {
		delta[name] = seq - before[name]
	}
	return delta
}

// TestStoredMessagesPerChainLink runs two chains of local nodes on the
// real services and counts what one link more stores in each stream and
// bucket (the difference between the two runs over the difference in
// links, so a run's own records do not count).
func TestStoredMessagesPerChainLink(t *testing.T) {
	ns := natstest.Start(t)
	devstacktest.Start(t, ns)
	op := client.New(ns.Connect(events.Operator), 10*time.Second)
	for _, svc := range []events.Identity{events.Planner, events.StateStore} {
		deadline := time.Now().Add(60 * time.Second)
		for op.Ping(context.Background(), svc.ServiceName()) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not come up", svc.ServiceName())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	js, err := jetstream.New(ns.Connect(busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	const short, long = 10, 60
	runChain(t, op, js, "warm", 3) // the host's records and the buckets exist
	a := runChain(t, op, js, "short", short)
	b := runChain(t, op, js, "long", long)
	var names []string
	for name := range b {
		names = append(names, name)
	}
	sort.Strings(names)
	total := 0.0
	var lines []string
	for _, name := range names {
		per := (float64(b[name]) - float64(a[name])) / (long - short)
		if b[name] == 0 && a[name] == 0 {
			continue
		}
		total += per
		lines = append(lines, fmt.Sprintf("%-22s %5.2f per link (%d in %d links, %d in %d)", name, per, b[name], long, a[name], short))
	}
	t.Logf("stored messages per chain link:\n%s\ntotal %.2f", strings.Join(lines, "\n"), total)
	if total > maxStoredPerLink {
		t.Errorf("a chain link stores %.2f messages, want at most %.0f:\n%s", total, maxStoredPerLink, strings.Join(lines, "\n"))
	}
	if per := (float64(b["KV_"+events.BucketState]) - float64(a["KV_"+events.BucketState])) / (long - short); per > maxProjectionPerLink {
		t.Errorf("the projection writes %.2f messages per chain link, want at most %.0f", per, maxProjectionPerLink)
	}
}
