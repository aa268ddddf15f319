package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	plannersvc "github.com/gantry-dev/gantry/services/planner/service"
	"github.com/nats-io/nats.go/jetstream"
)

// pruneComp is a composition of two hosts, every node printing lines;
// with extra, it also has a formula c on h1 that later runs do not have.
func pruneComp(extra, reset bool) *dag.Composition {
	c := &dag.Composition{Name: "fleet", Reset: reset,
		Hosts: map[string]dag.Host{"h1": {Transport: dag.TransportLocal}, "h2": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{
			{ID: "a", Server: "h1", Nodes: []dag.Node{{Name: "x", Run: "echo x one; echo x two"}, {Name: "y", Run: "echo y one"}}},
			{ID: "b", Server: "h2", DependsOn: []dag.FormulaDep{{Formula: "a"}}, Nodes: []dag.Node{{Name: "z", Run: "echo z one; echo z two"}}},
		}}
	if extra {
		c.Formulas = append(c.Formulas, dag.Formula{ID: "c", Server: "h1", Nodes: []dag.Node{{Name: "w", Run: "echo w one"}}})
	}
	return c
}

// keysOf lists a bucket's keys matching filter.
func (s *stack) keysOf(bucket, filter string) []string {
	s.t.Helper()
	ctx := context.Background()
	kv, err := s.js.KeyValue(ctx, bucket)
	if err != nil {
		s.t.Fatal(err)
	}
	l, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		s.t.Fatal(err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// typesOf lists the types of a workflow's messages in stream.
func (s *stack) typesOf(stream, id string) []string {
	var out []string
	s.workflowEnvelopes(stream, id, func(env *events.Envelope) { out = append(out, string(env.Type)) })
	return out
}

// everything of a workflow: its keys in each bucket, its messages in
// each stream, as "store: n".
func (s *stack) everything(id, name string) map[string]int {
	return map[string]int{
		"gantry_workflows": len(s.keysOf(events.BucketWorkflows, id)),
		"listing":          len(s.keysOf(events.BucketWorkflows, "composition."+name+"."+id)),
		"gantry_runs":      len(s.keysOf(events.BucketRuns, id)),
		"gantry_nodes":     len(s.keysOf(events.BucketNodes, id+".>")),
		"gantry_state": len(s.keysOf(events.BucketState, "wf."+id)) + len(s.keysOf(events.BucketState, "wf."+id+".>")) +
			len(s.keysOf(events.BucketState, "wf-page."+id+".>")) + len(s.keysOf(events.BucketState, "wf-doc."+id+".>")),
		"GANTRY_EVENTS": len(s.typesOf(events.StreamEvents, id)),
		"GANTRY_LOGS":   len(s.typesOf(events.StreamLogs, id)),
	}
}

// 20 runs of a composition, then gantry prune --keep 2: the older runs'
// records, documents, events and output lines are gone from every bucket
// and stream; the newest two stay, and so does the first, the latest run
// of a node the later ones do not have. Drift, state and a resubmit's
// skips are as before, and a workflow running through the prune is
// untouched and completes. A viewer may not prune.
func TestPruneKeepsTheLatestAndWhatRunsNeed(t *testing.T) {
	s := newStack(t, stackOptions{})
	bin := buildGantry(t)
	dir := t.TempDir()
	cli := func(identity events.Identity, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(identity))...)
		out, err := cmd.Output()
		code := 0
		if ee, isExit := err.(*exec.ExitError); isExit {
			code = ee.ExitCode()
			out = append(out, ee.Stderr...)
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}

	tl := newTimeline()
	defer func() { t.Logf("timeline:\n%s", tl) }()
	var ids []string
	for i := range 20 {
		id := s.mustSubmit(pruneComp(i == 0, true))
		if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
			t.Fatalf("run %d: %s", i+1, d.Status)
		}
		ids = append(ids, id)
	}
	tl.at("20 runs submitted one after another, each succeeded")
	first, pruned, kept := ids[0], ids[1:18], ids[18:]
	for _, id := range []string{first, pruned[0], kept[1]} {
		if got := s.everything(id, "fleet"); slices.Contains([]int{got["gantry_nodes"], got["gantry_state"], got["GANTRY_EVENTS"], got["GANTRY_LOGS"]}, 0) {
			t.Fatalf("run %s has not left everything: %v", id, got)
		}
	}

	// A workflow of another composition runs through the prune.
	gate := filepath.Join(dir, "go")
	other := &dag.Composition{Name: "other", Hosts: map[string]dag.Host{"h3": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "slow", Server: "h3", Nodes: []dag.Node{{Name: "wait", Run: "echo waiting; while [ ! -e " + gate + " ]; do sleep 0.05; done; echo released"}}}}}
	running := s.mustSubmit(other)
	s.waitFor("the other workflow's node to run", 20*time.Second, func() bool {
		return len(s.typesOf(events.StreamLogs, running)) > 0
	})
	// Its documents too (the state-store projects in batches: under load
	// its first line can be stored before them).
	s.waitFor("the other workflow's node running in its state", 20*time.Second, func() bool {
		return s.nodeState(running, "slow", "wait") == dag.NodeRunning
	})
	runningBefore := s.everything(running, "other")

	// A viewer may not prune.
	if code, out := cli(events.Viewer, "prune", "--keep", "2", "--timeout", "3s"); code != 3 || !strings.Contains(out, "not allowed") {
		t.Fatalf("viewer's prune: exit %d\n%s", code, out)
	}
	// Usage errors.
	if code, out := cli(events.Operator, "prune"); code != 2 || !strings.Contains(out, "--older-than") {
		t.Fatalf("prune without a rule: exit %d\n%s", code, out)
	}
	if code, _ := cli(events.Operator, "prune", "--older-than", "soon"); code != 2 {
		t.Fatalf("prune --older-than soon: exit %d", code)
	}

	// The dry run says what would go, and removes nothing.
	code, text := cli(events.Operator, "prune", "--keep", "2", "--dry-run")
	tl.at(fmt.Sprintf("gantry prune --keep 2 --dry-run: exit %d: %s", code, lineWith(text, "would prune")))
	if code != 0 || !strings.Contains(text, "would prune 17 finished workflow(s); 1 not finished") {
		t.Fatalf("dry run: exit %d\n%s", code, text)
	}
	t.Logf("gantry prune --keep 2 --dry-run:\n%s", text)
	code, out := cli(events.Operator, "prune", "--keep", "2", "--dry-run", "-o", "json")
	var dry struct {
		events.PruneReply
		Sizes []struct {
			Store         string
			Before, After events.StoreSize
		} `json:"sizes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &dry) != nil {
		t.Fatalf("dry run -o json: exit %d\n%s", code, out)
	}
	var dryIDs []string
	for _, p := range dry.Pruned {
		dryIDs = append(dryIDs, p.WorkflowID)
	}
	if !slices.Equal(dryIDs, pruned) || len(dry.Kept) != 1 || dry.Kept[0].WorkflowID != first || len(dry.Sizes) != 6 {
		t.Fatalf("dry run chose %v, kept %+v, sizes %+v; want %v and %s", dryIDs, dry.Kept, dry.Sizes, pruned, first)
	}
	if got := s.everything(pruned[0], "fleet"); got["gantry_workflows"] != 1 || got["GANTRY_EVENTS"] == 0 || got["GANTRY_LOGS"] == 0 {
		t.Fatalf("the dry run removed something: %v", got)
	}

	// The prune.
	code, out = cli(events.Operator, "prune", "--keep", "2", "-o", "json")
	var done struct {
		events.PruneReply
		Sizes []struct {
			Store         string
			Before, After events.StoreSize
		} `json:"sizes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &done) != nil || len(done.Pruned) != 17 {
		t.Fatalf("prune: exit %d\n%s", code, out)
	}
	tl.at(fmt.Sprintf("gantry prune --keep 2: exit %d, %d workflows pruned", code, len(done.Pruned)))
	// The sizes after are measured once the state-store removed the pruned
	// runs' documents (before, they were read before it had, and showed
	// gantry_state as it was).
	for _, sz := range done.Sizes {
		if sz.Store == events.BucketState && sz.After.Messages >= sz.Before.Messages {
			t.Errorf("gantry_state after the prune: %d messages, before %d", sz.After.Messages, sz.Before.Messages)
		}
	}
	for _, id := range pruned {
		s.waitFor("every trace of "+id+" to go", 20*time.Second, func() bool {
			got := s.everything(id, "fleet")
			return got["gantry_workflows"]+got["listing"]+got["gantry_runs"]+got["gantry_nodes"]+got["gantry_state"]+got["GANTRY_LOGS"] == 0 &&
				slices.Equal(s.typesOf(events.StreamEvents, id), []string{string(events.TypeWorkflowPruned)})
		})
	}
	tl.at("every trace of the 17 pruned runs gone (one pruned event each left)")
	for _, id := range []string{first, kept[0], kept[1]} {
		if got := s.everything(id, "fleet"); slices.Contains([]int{got["gantry_workflows"], got["listing"], got["gantry_runs"], got["gantry_nodes"], got["gantry_state"], got["GANTRY_EVENTS"], got["GANTRY_LOGS"]}, 0) {
			t.Errorf("kept run %s lost something: %v", id, got)
		}
	}
	s.waitFor("the state-store to catch up", 10*time.Second, func() bool { return stateCaughtUp(s.js) })
	var sizes strings.Builder
	for i, sz := range storeSizes(t, s.js) {
		sizes.WriteString(events.SizedStores[i] + ": " + sz + "\n")
	}
	t.Logf("after the prune:\n%s", sizes.String())

	// The running workflow is untouched, and completes.
	if got := s.everything(running, "other"); !equalCounts(got, runningBefore) {
		t.Fatalf("the running workflow changed: %v, was %v", got, runningBefore)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if d := s.wait(running, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("the running workflow ended %s", d.Status)
	}
	tl.at("the workflow running through the prune succeeded")

	// Drift and state are right for what the kept runs did.
	// (c/w, which only the first run had, is in place: orphaned for a
	// composition without it, ok for one with it.)
	if rep := s.drift(pruneComp(false, false)); rep.Counts[events.DriftOK] != 3 || rep.Counts[events.DriftOrphaned] != 1 || len(rep.Items) != 4 {
		t.Errorf("drift: %+v", rep)
	}
	if rep := s.drift(pruneComp(true, false)); rep.Counts[events.DriftOK] != 4 || len(rep.Items) != 4 {
		t.Errorf("drift with c: %+v", rep)
	}
	if code, out := cli(events.Operator, "state", "-o", "json"); code != 0 || !strings.Contains(out, "h1") || !strings.Contains(out, "h2") {
		t.Errorf("gantry state: exit %d\n%s", code, out)
	}
	// A pruned workflow is no more.
	if _, err := s.cl.WithTimeout(5*time.Second).Status(context.Background(), pruned[0]); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("status of a pruned workflow: %v, want a 404", err)
	}

	// A resubmit skips what the latest run did, and what the first did
	// (c/w, which no later run had).
	again := s.mustSubmit(pruneComp(true, false))
	d := s.wait(again, 30*time.Second)
	tl.at("resubmit " + string(d.Status))
	if d.Status != dag.WorkflowSucceeded {
		t.Fatalf("resubmit: %s", d.Status)
	}
	for f, fd := range d.Formulas {
		for n, nd := range fd.Nodes {
			if nd.Status != dag.NodeSkipped {
				t.Errorf("resubmit: %s/%s %s, want skipped", f, n, nd.Status)
			}
		}
	}
}

// lineWith is the first line of text that holds sub ("" when none).
func lineWith(text, sub string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// equalCounts compares two workflows' counts of records and messages.
func equalCounts(a, b map[string]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

// storeSizes reads each of events.SizedStores: "messages, bytes".
func storeSizes(t *testing.T, js jetstream.JetStream) []string {
	var out []string
	for _, st := range events.SizedStores {
		str, err := js.Stream(context.Background(), events.StoreStream(st))
		if err != nil {
			t.Fatal(err)
		}
		state := str.CachedInfo().State
		out = append(out, strconv.FormatUint(state.Msgs, 10)+" messages, "+strconv.FormatUint(state.Bytes, 10)+" bytes")
	}
	return out
}

// The sizes a prune frees on a fleet: GANTRY_PRUNE_FLEET=1000 runs a
// fleet of that many local hosts three times and prunes all but the
// last, logging gantry prune --dry-run's table and the sizes after
// (docs/operations.md quotes them). Off by default: it takes minutes.
func TestPruneAFleet(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("GANTRY_PRUNE_FLEET"))
	if n <= 0 {
		t.Skip("set GANTRY_PRUNE_FLEET=<hosts> to measure")
	}
	s := newStack(t, stackOptions{})
	bin := buildGantry(t)
	doc := append(bigFleetYAML("fleet", n), []byte("reset: true\n")...)
	var ids []string
	for i := range 3 {
		r, code := s.submit(doc)
		if code != "" || r.Status != "accepted" {
			t.Fatalf("submit %d (%s): %v", i, code, r.Errors)
		}
		start := time.Now()
		if d := s.wait(r.WorkflowID, 10*time.Minute); d.Status != dag.WorkflowSucceeded {
			t.Fatalf("run %d: %s", i, d.Status)
		}
		t.Logf("run %d of %d hosts: %s", i+1, n, time.Since(start).Round(time.Millisecond))
		ids = append(ids, r.WorkflowID)
	}
	s.waitFor("the state-store to catch up", time.Minute, func() bool { return stateCaughtUp(s.js) })
	cli := func(args ...string) string {
		t.Helper()
		start := time.Now()
		out, err := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...).CombinedOutput()
		if err != nil {
			t.Fatalf("gantry %v: %v\n%s", args, err, out)
		}
		t.Logf("gantry %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
		return string(out)
	}
	cli("prune", "--keep", "1", "--dry-run")
	cli("prune", "--keep", "1")
	for _, id := range ids[:2] {
		s.waitFor("every trace of "+id+" to go", 2*time.Minute, func() bool {
			got := s.everything(id, "fleet")
			return got["gantry_workflows"]+got["gantry_runs"]+got["gantry_nodes"]+got["gantry_state"]+got["GANTRY_LOGS"] == 0
		})
	}
	var sizes strings.Builder
	for i, sz := range storeSizes(t, s.js) {
		sizes.WriteString(events.SizedStores[i] + ": " + sz + "\n")
	}
	t.Logf("after the prune, every trace gone:\n%s", sizes.String())
}

// The planner applies its retention setting by itself, as gantry prune
// does: here every finished run but the newest of each composition.
func TestRetentionPrunesByItself(t *testing.T) {
	first, interval := plannersvc.RetentionFirst, plannersvc.RetentionInterval
	plannersvc.RetentionFirst, plannersvc.RetentionInterval = 0, 300*time.Millisecond
	// Restored once the stack has stopped (cleanups run last first).
	t.Cleanup(func() { plannersvc.RetentionFirst, plannersvc.RetentionInterval = first, interval })
	s := newStack(t, stackOptions{retention: plannersvc.Retention{Keep: 1}})
	var ids []string
	for range 3 {
		id := s.mustSubmit(pruneComp(false, true))
		if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
			t.Fatalf("run: %s", d.Status)
		}
		ids = append(ids, id)
	}
	for _, id := range ids[:2] {
		s.waitFor("retention to prune "+id, 20*time.Second, func() bool {
			got := s.everything(id, "fleet")
			return got["gantry_workflows"]+got["gantry_runs"]+got["gantry_nodes"]+got["gantry_state"]+got["GANTRY_LOGS"] == 0
		})
	}
	if got := s.everything(ids[2], "fleet"); got["gantry_workflows"] != 1 || got["gantry_nodes"] == 0 || got["gantry_state"] == 0 {
		t.Errorf("the newest run lost something: %v", got)
	}
	var reason string
	s.workflowEnvelopes(events.StreamEvents, ids[0], func(env *events.Envelope) {
		var p events.WorkflowPruned
		if env.Type == events.TypeWorkflowPruned && events.DecodeData(env, &p) == nil {
			reason = p.Reason
		}
	})
	if !strings.HasPrefix(reason, "retention") {
		t.Errorf("pruned event's reason %q", reason)
	}
}
