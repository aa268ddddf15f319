package hostdrift

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	one := 1
	check, none, files := Node{HasCheck: true}, Node{}, Node{HasFiles: true}
	passed := &Outcome{Status: dag.NodeSucceeded, Check: events.CheckOK}
	refused := &Outcome{Status: dag.NodeFailed, Unreachable: true, Error: "cannot connect to 127.0.0.1:1: connection refused"}
	for name, tc := range map[string]struct {
		n          Node
		o, blocker *Outcome
		want, why  string
	}{
		"check passed":                   {check, passed, nil, OK, ""},
		"check exited 1":                 {check, &Outcome{Status: dag.NodeSucceeded, Check: events.CheckWouldChange, ExitCode: &one}, nil, Changed, "its check exited 1"},
		"no check, no files":             {none, passed, nil, Unknown, "no check and no files: nothing can tell"},
		"no check, no files, no answer":  {none, nil, nil, Unknown, "nothing can tell"},
		"no check, host refused":         {none, refused, nil, Unknown, "nothing can tell"},
		"host refused the connection":    {check, refused, nil, Unreachable, "connection refused"},
		"no answer within the timeout":   {check, nil, nil, Unreachable, "no answer within 1m0s (--timeout)"},
		"blocked behind an unreachable":  {check, &Outcome{Status: dag.NodeBlocked, Blocker: "a"}, refused, Unreachable, "connection refused"},
		"blocked behind a failed check":  {check, &Outcome{Status: dag.NodeBlocked, Blocker: "a"}, &Outcome{Status: dag.NodeFailed, Error: "secret"}, Unknown, "not checked: a could not be checked"},
		"the check failed, host reached": {check, &Outcome{Status: dag.NodeFailed, Error: "become: sudo wants a password"}, nil, Unknown, "sudo wants a password"},
		"cancelled":                      {check, &Outcome{Status: dag.NodeCancelled, Reason: "cancelled: killed on the host"}, nil, Unknown, "killed on the host"},
		"a file missing":                 {files, &Outcome{Status: dag.NodeSucceeded, Files: []File{{Path: "/a", State: OK}, {Path: "/b", State: Missing}}}, nil, Missing, "file /b missing"},
		"a file changed, check passed":   {Node{HasCheck: true, HasFiles: true}, &Outcome{Status: dag.NodeSucceeded, Check: events.CheckOK, Files: []File{{Path: "/a", State: Changed}}}, nil, Changed, "file /a changed"},
		"files as wanted, no check":      {files, &Outcome{Status: dag.NodeSucceeded, Check: events.CheckWouldChange, Files: []File{{Path: "/a", State: OK}}}, nil, OK, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, why := Classify(tc.n, tc.o, tc.blocker, time.Minute)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("Classify = %s (%q), want %s (%q)", got, why, tc.want, tc.why)
			}
			if got == OK && (tc.o == nil || tc.o.Status != dag.NodeSucceeded) {
				t.Fatalf("ok without a completed check")
			}
		})
	}
}

func TestMergeAndReconcile(t *testing.T) {
	t.Parallel()
	rec := &events.DriftReport{Items: []events.DriftItem{
		{Host: "h", Formula: "f", Node: "a", Drift: events.DriftOK, HaveStatus: "succeeded", WorkflowID: "w1"},
		{Host: "h", Formula: "f", Node: "b", Drift: events.DriftOK},
		{Host: "h", Formula: "f", Node: "c", Drift: events.DriftMissing},
		{Host: "h", Formula: "f", Node: "d", Drift: events.DriftOK},
		{Host: "h", Formula: "f", Node: "e", Drift: events.DriftChanged},
		{Host: "h", Formula: "f", Node: "old", Drift: events.DriftOrphaned},
	}}
	items := []Item{
		{Host: "h", Formula: "f", Node: "e", Drift: Unknown},
		{Host: "h", Formula: "f", Node: "a", Drift: Changed},
		{Host: "h", Formula: "f", Node: "b", Drift: OK},
		{Host: "h", Formula: "f", Node: "c", Drift: Unknown},
		{Host: "h", Formula: "f", Node: "d", Drift: Unknown},
		{Host: "h", Formula: "f", Node: "u", Drift: Unreachable},
		{Host: "h", Formula: "f", Node: "n", Drift: Missing}, // no record at all
	}
	rep := Merge("comp", "chk", items, rec)
	var order []string
	for _, it := range rep.Items {
		order = append(order, it.Node)
	}
	if want := []string{"a", "b", "c", "d", "e", "n", "old", "u"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	wantCounts := map[string]int{OK: 1, Changed: 1, Missing: 1, Unreachable: 1, Unknown: 3, Orphaned: 1}
	for s, n := range wantCounts {
		if rep.Counts[s] != n {
			t.Errorf("count %s = %d, want %d (%v)", s, rep.Counts[s], n, rep.Counts)
		}
	}
	type pick struct{ run, rerun bool }
	want := map[string]pick{
		"a":   {true, true},   // changed on the host, in place by the records: rerun
		"b":   {false, false}, // ok
		"c":   {true, false},  // unknown, missing by the records
		"d":   {false, false}, // unknown, in place by the records
		"e":   {true, false},  // unknown, edited spec
		"n":   {true, false},  // missing, no record: runs anyway
		"u":   {false, false}, // unreachable
		"old": {false, false},
	}
	for _, it := range rep.Items {
		run, rerun := it.Reconcile()
		if (pick{run, rerun}) != want[it.Node] {
			t.Errorf("%s (%s, records %s): run %v rerun %v, want %+v", it.Node, it.Drift, it.Records, run, rerun, want[it.Node])
		}
	}
	if rep.Items[0].WorkflowID != "w1" || rep.Items[0].RecordedStatus != "succeeded" || rep.Items[5].Records != events.DriftMissing {
		t.Errorf("records not beside the hosts' states: %+v", rep.Items)
	}
	if changes, unreachable := rep.Found(); !changes || !unreachable {
		t.Errorf("Found = %v %v", changes, unreachable)
	}
	quiet := Merge("comp", "chk", []Item{{Host: "h", Formula: "f", Node: "d", Drift: Unknown}}, &events.DriftReport{})
	if changes, unreachable := quiet.Found(); changes || unreachable {
		t.Errorf("unknown alone found %v %v", changes, unreachable)
	}
}

// The check run of a composition: a check of every formula at once, one
// attempt each, within the timeout, the composition's targets kept as the
// formulas they select; and it loads as the planner will load it.
func TestCheckRun(t *testing.T) {
	t.Parallel()
	doc := `{"name":"c","retry":{"max_attempts":3},"on_failure":"stop","targets":["b"],"reset":true,
 "hosts":{"h":{"transport":"local"}},
 "formulas":[
  {"id":"a","server":"h","nodes":[{"name":"x","run":"true","check":"test -e /x","retry":{"max_attempts":4}}],
   "health_gate":{"check":"true","timeout":"5s","retries":1}},
  {"id":"b","server":"h","depends_on":[{"formula":"a","condition":"healthy"}],"nodes":[{"name":"y","run":"true"}]},
  {"id":"z","server":"h","nodes":[{"name":"q","run":"true"}]}]}`
	root, err := dag.ParseJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckRun(root, []string{"a", "b"}, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	body, err := root.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	c, err := dag.ParseJSONComposition(body)
	if err != nil {
		t.Fatalf("the check run does not load: %v\n%s", err, body)
	}
	if c.Operation != dag.OpCheck || c.OnFailure != dag.OnFailureContinue || c.Reset || c.Retry.MaxAttempts != 1 || c.Timeout.D() != 90*time.Second {
		t.Errorf("check run %+v", c)
	}
	p := dag.PlanLoaded(c)
	var ids []string
	for _, f := range p.Formulas {
		ids = append(ids, f.ID)
		if len(f.DependsOn) > 0 {
			t.Errorf("formula %s still waits: %+v", f.ID, f)
		}
	}
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Errorf("formulas %v, want a and b (z is not selected)", ids)
	}
	if c.Formulas[0].HealthGate != nil {
		t.Errorf("a health gate is left: %+v", c.Formulas[0].HealthGate)
	}
	if n := c.Formulas[0].Nodes[0]; n.Retry != nil || n.Check != "test -e /x" {
		t.Errorf("node %+v", n)
	}
	var back map[string]any
	if json.Unmarshal(body, &back) != nil {
		t.Fatal("not JSON")
	}
	if err := CheckRun(&dag.Value{Kind: dag.KindList}, nil, time.Minute); err == nil {
		t.Error("a document that is not a mapping was taken")
	}
}
