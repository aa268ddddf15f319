package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/events/eventstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// attack is what a host's error or output may hold to drive the operator's
// terminal: erase the line, move the cursor up, set the window title (an
// OSC ended by BEL).
const attack = "\x1b[2K\x1b[1A\x1b]0;pwned\x07"

// hostile is attack, a C1 CSI (U+009B), a byte that is not UTF-8 (0x9b,
// an 8-bit CSI), a carriage return and a tab.
const hostile = attack + "\u009b2J\x9b2J\rX\tY"

// shown is how attack reads once escaped.
const shown = `\x1b[2K\x1b[1A\x1b]0;pwned\x07`

// assertTermSafe fails unless out is UTF-8 with no control character but
// newlines and tabs: nothing in it can drive a terminal. With shownWant, it
// must show the attack escaped too (it was printed, not dropped).
func assertTermSafe(t *testing.T, what, out string, shownWant bool) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: printed bytes that are not UTF-8: %q", what, out)
	}
	if i := strings.IndexFunc(out, func(r rune) bool {
		return r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0)
	}); i >= 0 {
		t.Errorf("%s: printed a raw control character (%q at %d): %q", what, out[i:i+1], i, out)
	}
	if shownWant && !strings.Contains(out, shown) {
		t.Errorf("%s: does not show the host's text escaped (%s): %q", what, shown, out)
	}
}

// TestWatchEscapesHostText: watch prints what hosts said (a node's error,
// its stderr tail, exit and cancel reasons, a formula's error, a health
// gate's error, a rollout's stop) with control characters escaped.
func TestWatchEscapesHostText(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ref := events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "web", Host: "h1", Node: "build", Operation: dag.OpCreate, Generation: 1}
	wf := ref
	wf.Formula, wf.Host, wf.Node = "", "", ""
	fr := ref
	fr.Node = ""
	ro := wf
	ro.Formula = "web"
	for name, p := range map[string]events.Payload{
		"node error": &events.NodeEvent{Ref: ref, Status: dag.NodeFailed, Run: events.Run{Attempt: 1, ExitCode: new(int), Error: hostile}},
		"stderr tail": &events.NodeEvent{Ref: ref, Status: dag.NodeFailed, Run: events.Run{Attempt: 1, ExitCode: new(int), Error: "exit status 1"},
			StderrTail: "first\n" + hostile + "\n"},
		"node reason":     &events.NodeEvent{Ref: ref, Status: dag.NodeCancelled, Reason: hostile, Check: events.CheckResult(hostile)},
		"node blocked":    &events.FormulaEvent{Ref: fr, Status: dag.FormulaBlocked, Blocker: hostile, Run: events.Run{EndedAt: &now}},
		"formula error":   &events.FormulaEvent{Ref: fr, Status: dag.FormulaFailed, Run: events.Run{EndedAt: &now, Error: "line 1\n" + hostile}},
		"workflow reason": &events.WorkflowEvent{Ref: wf, Status: dag.WorkflowFailed, Reason: hostile},
		"health gate":     &events.HealthEvent{Ref: fr, Status: events.HealthFail, Final: true, Retries: 3, Run: events.Run{Attempt: 3, Error: hostile}, OutputTail: hostile},
		"rollout stopped": &events.RolloutEvent{Ref: ro, Status: events.RolloutStopped, Batch: 1, Batches: 2, Reason: hostile},
		"rollout batch":   &events.RolloutEvent{Ref: ro, Status: events.RolloutBatchStarted, Batch: 1, Batches: 2, Instances: []string{"web-1", hostile}},
	} {
		var b strings.Builder
		printEvent(&b, envOf(t, p))
		assertTermSafe(t, name, b.String(), true)
		// a failed node's stderr is one line of its own, under the node's;
		// a failed gate's last output too, under its verdict
		want := 1
		if name == "stderr tail" || name == "health gate" {
			want = 2
		}
		if n := strings.Count(b.String(), "\n"); n != want {
			t.Errorf("%s: %d lines, want %d: %q", name, n, want, b.String())
		}
	}
}

// TestStatusEscapesHostText: status prints the workflow's error and the
// formulas' and nodes' errors, hosts, requesters and reasons with control
// characters escaped; a tab cannot add a column to the table.
func TestStatusEscapesHostText(t *testing.T) {
	t.Parallel()
	code := 1
	doc := &events.WorkflowDoc{WorkflowID: "w1", Workflow: "w" + hostile, Operation: dag.OpCreate, Status: dag.WorkflowFailed,
		Error:       "first line\n" + hostile,
		SubmittedBy: &events.Principal{Account: "GANTRY_CLIENTS", User: "UA", Name: hostile, Attested: true},
		Requests:    []events.Request{{Status: dag.WorkflowCancelled, Reason: hostile, By: events.Principal{Account: "A", Name: hostile, Attested: true}}},
		Formulas: map[string]*events.FormulaDoc{
			"web": {Host: "h1\t\tsucceeded", Status: dag.FormulaFailed, Error: hostile + "\nmore", Nodes: map[string]*events.NodeDoc{
				"build": {Status: dag.NodeFailed, Attempts: 1, ExitCode: &code, Error: hostile},
				"test":  {Status: dag.NodeBlocked, Blocker: hostile},
			}},
			"db" + hostile: {Host: hostile, Status: dag.FormulaSucceeded, Health: &events.HealthDoc{Status: events.HealthPass, Attempts: 1, Output: hostile}, Nodes: map[string]*events.NodeDoc{
				"n" + hostile: {Status: dag.NodeSucceeded, Attempts: 1, Check: events.CheckResult(hostile)},
			}},
		}}
	var b strings.Builder
	if err := statusTable(&b, doc); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	assertTermSafe(t, "status", out, true)
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "web") && !strings.Contains(l, `h1\x09\x09succeeded`) { // the formula's row
			t.Errorf("a tab in the host moved the columns: %q", l)
		}
	}
	if !strings.Contains(out, "  first line\n    "+shown) {
		t.Errorf("the workflow's error's second line is not indented under the first:\n%s", out)
	}
}

// TestLogLineEscapesHost: logs escapes the host's name, and a line's
// bytes that are not UTF-8 (an 8-bit CSI), as it does its controls.
func TestLogLineEscapesHost(t *testing.T) {
	t.Parallel()
	env := &events.Envelope{Time: time.Now()}
	ll := &events.LogLine{Ref: events.Ref{Host: "h1" + attack, Formula: "f", Node: "n"}, Attempt: 1, Stream: events.Stderr, Line: "caf\xe9 \x9b2J"}
	var b strings.Builder
	if err := printLogLine(&b, env, ll, "text"); err != nil {
		t.Fatal(err)
	}
	assertTermSafe(t, "logs", b.String(), true)
	if !strings.HasSuffix(b.String(), `caf\xe9 \x9b2J`+"\n") {
		t.Errorf("line printed as %q", b.String())
	}
}

// TestPlanAndValidateEscapeTheComposition: plan (text and mermaid) shows a
// command and a gate check with control characters escaped, and validate
// the name of a file the composition names.
func TestPlanAndValidateEscapeTheComposition(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := filepath.Join(dir, "c.yaml")
	os.WriteFile(c, []byte(`name: wf
hosts: {h1: {transport: local}}
formulas:
  - id: a
    server: h1
    nodes: [{name: n, run: "echo \e[2K\e[1A\e]0;pwned\a \u009b2J"}]
    health_gate: {check: "true \e[2K\e[1A\e]0;pwned\a", timeout: 10s, retries: 1}
`), 0o644)
	for _, format := range []string{"text", "mermaid", "dot"} {
		code, out, errOut := run(t, "plan", c, "--format", format)
		if code != ExitOK {
			t.Fatalf("plan --format %s: exit %d\n%s", format, code, errOut)
		}
		assertTermSafe(t, "plan --format "+format, out, format == "text")
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: wf\ninventory: \"inv\\e[2K\\e[1A\\e]0;pwned\\a.yaml\"\n"), 0o644)
	for _, args := range [][]string{{"validate", bad}, {"plan", bad}, {"submit", bad, "--server", "nats://127.0.0.1:1"}, {"drift", bad, "--server", "nats://127.0.0.1:1"}} {
		code, out, errOut := run(t, args...)
		cmd := args[0]
		if code != ExitFailed {
			t.Errorf("%s: exit %d\n%s", cmd, code, errOut)
		}
		assertTermSafe(t, cmd, out+errOut, true)
	}
}

// TestInventoryEscapesHostVars: inventory shows addresses, users, jump
// hosts and variables with control characters escaped, C1 ones too.
func TestInventoryEscapesHostVars(t *testing.T) {
	t.Parallel()
	inv := filepath.Join(t.TempDir(), "inv.yaml")
	os.WriteFile(inv, []byte(`all:
  hosts:
    h1: {ansible_host: "10.0.0.1\e[2K\e[1A\e]0;pwned\a", ansible_user: "u\u009b2J", role: "web\u009b2J", note: "a\tb"}
  children:
    web: {hosts: {h1: {}}}
`), 0o644)
	code, out, errOut := run(t, "inventory", inv)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	assertTermSafe(t, "inventory", out, true)
}

// answer is what a fake service replies: body as JSON, or with code a
// service error with description desc (and body).
type answer struct {
	body       any
	code, desc string
}

// fakeBus starts a NATS server with JetStream on 127.0.0.1 and answers
// each subject's requests with its answer; it returns the server's URL and
// a connection to it.
func fakeBus(t *testing.T, answers map[string]answer) (string, *nats.Conn) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	for subj, a := range answers {
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
			r := nats.NewMsg(m.Reply)
			r.Data = mustJSON(a.body)
			if a.code != "" {
				r.Header.Set(micro.ErrorCodeHeader, a.code)
				r.Header.Set(micro.ErrorHeader, a.desc)
			}
			_ = m.RespondMsg(r)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s.ClientURL(), nc
}

// TestCommandsEscapeWhatServicesSay: what the state-store and the planner
// answer (names, hosts, errors, reasons, the problems of a composition)
// is printed with control characters escaped, on stdout and in errors.
func TestCommandsEscapeWhatServicesSay(t *testing.T) {
	t.Parallel()
	comp := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(comp, []byte("name: wf\nhosts: {h1: {transport: local}}\nformulas:\n  - id: a\n    server: h1\n    nodes: [{name: n, run: 'true'}]\n"), 0o644)
	now := time.Now()
	doc := events.WorkflowDoc{WorkflowID: "w1", Workflow: "wf", Status: dag.WorkflowFailed, Error: hostile, CreatedAt: now,
		Formulas: map[string]*events.FormulaDoc{"a": {Host: hostile, Status: dag.FormulaFailed, Nodes: map[string]*events.NodeDoc{"n" + hostile: {Status: dag.NodeFailed, Error: hostile}}}}}
	drift := events.DriftReport{Workflow: "wf" + hostile, Counts: map[string]int{events.DriftMissing: 1, events.DriftOrphaned: 1}, Items: []events.DriftItem{
		{Host: "h1" + hostile, Formula: "a", Node: "n" + hostile, Drift: events.DriftMissing, HaveStatus: hostile, WorkflowID: hostile},
		{Host: hostile, Formula: "gone" + hostile, Node: hostile, Drift: events.DriftOrphaned},
	}}
	rejected := answer{code: "400", desc: "rejected", body: events.SubmitReply{Status: "rejected", Errors: []string{"formulas[0]: " + hostile}}}
	for _, c := range []struct {
		name    string
		args    []string
		answers map[string]answer
	}{
		{"list", []string{"list"}, map[string]answer{events.StateList: {body: []events.WorkflowSummary{{WorkflowID: "w1" + hostile, Workflow: hostile, Operation: dag.Operation(hostile), Status: dag.WorkflowState(hostile), CreatedAt: now}}}}},
		{"status", []string{"status", "w1"}, map[string]answer{events.StateWorkflow: {body: doc}}},
		{"status of none", []string{"status", "w1"}, map[string]answer{events.StateWorkflow: {code: "404", desc: "no workflow " + hostile}, events.StateList: {body: []events.WorkflowSummary{}}}},
		{"state", []string{"state"}, map[string]answer{events.StateHost: {body: []events.HostNode{{Host: hostile, Workflow: hostile, Formula: "a", Node: hostile, Status: dag.NodeFailed, Operation: dag.OpCreate,
			SpecHash: hostile, WorkflowID: hostile, EndedAt: &now, InPlace: &events.InPlace{SpecHash: "sha256:" + hostile}, Check: &events.HostCheck{Status: dag.NodeState(hostile)}}}}}},
		{"state --rebuild", []string{"state", "--rebuild", "--check"}, map[string]answer{events.StateRebuild: {body: events.RebuildReport{Differing: []string{hostile, "k" + hostile}, Kept: []string{"k" + hostile}, Lost: hostile}}}},
		{"drift --records", []string{"drift", comp, "--records"}, map[string]answer{events.StateDrift: {body: drift}}},
		{"drift --records refused", []string{"drift", comp, "--records"}, map[string]answer{events.StateDrift: {code: "400", desc: "state.drift: " + hostile}}},
		{"reconcile --records --dry-run", []string{"reconcile", comp, "--records", "--dry-run"}, map[string]answer{events.StateDrift: {body: drift}}},
		{"reconcile --records rejected", []string{"reconcile", comp, "--records"}, map[string]answer{events.StateDrift: {body: drift}, events.SubjectSubmit: rejected}},
		{"submit rejected", []string{"submit", comp}, map[string]answer{events.SubjectSubmit: rejected}},
		{"submit accepted", []string{"submit", comp}, map[string]answer{events.SubjectSubmit: {body: events.SubmitReply{Status: "accepted", WorkflowID: "w1" + hostile, Plan: &dag.Plan{Workflow: hostile}}}}},
		{"planner error", []string{"submit", comp}, map[string]answer{events.SubjectSubmit: {code: "500", desc: hostile}}},
		{"cancel", []string{"cancel", "w1"}, map[string]answer{events.StateWorkflow: {body: doc}, events.WorkflowControl("w1", events.VerbCancel): {body: events.ControlReply{WorkflowID: "w1" + hostile, Status: dag.WorkflowState(hostile)}}}},
		{"cancel refused", []string{"cancel", "w1"}, map[string]answer{events.StateWorkflow: {body: doc}, events.WorkflowControl("w1", events.VerbCancel): {code: "409", desc: hostile}}},
		{"watch of an id many start", []string{"watch", "w"}, map[string]answer{events.StateWorkflow: {code: "404", desc: "no workflow w"}, events.StateList: {body: []events.WorkflowSummary{{WorkflowID: "w1" + hostile}, {WorkflowID: "w2" + hostile}}}}},
		{"logs of a node not there", []string{"logs", "w1", "a/x"}, map[string]answer{events.StateWorkflow: {body: doc}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url, _ := fakeBus(t, c.answers)
			code, out, errOut := run(t, append(c.args, "--server", url, "--timeout", "5s")...)
			t.Logf("exit %d", code)
			assertTermSafe(t, "stdout", out, false)
			assertTermSafe(t, "stderr", errOut, false)
			if !strings.Contains(out+errOut, shown) {
				t.Errorf("what the service said is not shown escaped:\n%s%s", out, errOut)
			}
		})
	}
}

// TestWatchStreamEscapesHostText: gantry watch, reading a workflow's events
// from the stream, prints a failed node's error, its stderr and the
// workflow's reason with control characters escaped.
func TestWatchStreamEscapesHostText(t *testing.T) {
	t.Parallel()
	now := time.Now()
	url, nc := fakeBus(t, map[string]answer{events.StateWorkflow: {body: events.WorkflowDoc{WorkflowID: "w1", Workflow: "w", Status: dag.WorkflowRunning, CreatedAt: now.Add(-time.Minute), Generation: 1}}})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, eventbus.Streams(1)[0]); err != nil {
		t.Fatal(err)
	}
	ref := events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "web", Host: "h1", Node: "build", Operation: dag.OpCreate, Generation: 1}
	wf := ref
	wf.Formula, wf.Host, wf.Node = "", "", ""
	for _, p := range []events.Payload{
		&events.WorkflowEvent{Ref: wf, Status: dag.WorkflowRunning, TotalNodes: 1},
		&events.NodeEvent{Ref: ref, Status: dag.NodeFailed, Run: events.Run{Attempt: 1, ExitCode: new(int), Error: attack}, StderrTail: attack},
		&events.WorkflowEvent{Ref: wf, Status: dag.WorkflowFailed, Reason: attack},
	} {
		b, _, err := eventstest.Marshal("test", p)
		if err != nil {
			t.Fatal(err)
		}
		subj := events.WorkflowLifecycle("w1")
		if _, ok := p.(*events.NodeEvent); ok {
			subj = events.HostLifecycle("h1")
		}
		if _, err := js.Publish(ctx, subj, b); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run(t, "watch", "w1", "--server", url, "--timeout", "10s")
	if code != ExitFailed {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	assertTermSafe(t, "watch", out+errOut, true)
	if n := strings.Count(out, shown); n != 4 {
		t.Errorf("want the error, the stderr line, the reason and what failed shown escaped (4), got %d:\n%s", n, out)
	}
}

// TestJSONOutputEscapesC1: -o json prints what hosts said as JSON escapes,
// the C1 controls (which encoding/json leaves as they are) and bytes that
// are not UTF-8 (which a message on the bus may hold) too.
func TestJSONOutputEscapesC1(t *testing.T) {
	t.Parallel()
	const c1 = "x\u009b2J\x7f"
	now := time.Now()
	dir := t.TempDir()
	comp := filepath.Join(dir, "c.yaml")
	os.WriteFile(comp, []byte("name: wf\nhosts: {h1: {transport: local}}\nformulas:\n  - id: a\n    server: h1\n    nodes: [{name: n, run: \"echo \\u009b2J\"}]\n"), 0o644)
	inv := filepath.Join(dir, "inv.yaml")
	os.WriteFile(inv, []byte("all:\n  hosts:\n    h1: {ansible_host: \"10.0.0.1\\u009b2J\"}\n"), 0o644)
	url, nc := fakeBus(t, map[string]answer{
		events.StateList:     {body: []events.WorkflowSummary{{WorkflowID: "w1", Workflow: c1, CreatedAt: now}}},
		events.StateWorkflow: {body: events.WorkflowDoc{WorkflowID: "w1", Workflow: "w", Error: c1, CreatedAt: now.Add(-time.Minute), Generation: 1}},
		events.StateHost:     {body: []events.HostNode{{Host: "h1", Node: "n", Formula: "a", Check: &events.HostCheck{Error: c1}}}},
		events.StateDrift:    {body: events.DriftReport{Workflow: "wf", Items: []events.DriftItem{{Host: "h1", Formula: "a", Node: "n", Drift: events.DriftMissing, HaveStatus: c1}}}},
	})
	outs := map[string]string{}
	for _, args := range [][]string{{"list"}, {"status", "w1"}, {"state"}, {"drift", comp, "--records"}} {
		_, out, errOut := run(t, append(args, "-o", "json", "--server", url, "--timeout", "5s")...)
		outs[args[0]+" -o json"] = out + errOut
	}
	_, out, errOut := run(t, "plan", comp, "--format", "json")
	outs["plan --format json"] = out + errOut
	_, out, errOut = run(t, "inventory", inv, "-o", "json")
	outs["inventory -o json"] = out + errOut
	var b strings.Builder
	if err := printLogLine(&b, &events.Envelope{Time: now}, &events.LogLine{Ref: events.Ref{Host: "h1", Formula: "a", Node: "n"}, Attempt: 1, Stream: events.Stdout, Line: c1}, formatJSON); err != nil {
		t.Fatal(err)
	}
	outs["logs -o json"] = b.String()

	// watch -o json prints each event as the bus has it: one holding a C1
	// control and a byte that is not UTF-8.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, eventbus.Streams(1)[0]); err != nil {
		t.Fatal(err)
	}
	wf := events.Ref{WorkflowID: "w1", Workflow: "w", Operation: dag.OpCreate, Generation: 1}
	msg, _, err := eventstest.Marshal("test", &events.WorkflowEvent{Ref: wf, Status: dag.WorkflowFailed, Reason: "MARK"})
	if err != nil {
		t.Fatal(err)
	}
	msg = bytes.Replace(msg, []byte("MARK"), []byte("x\u009b2J \x9b2J"), 1)
	if _, err := js.Publish(ctx, events.WorkflowLifecycle("w1"), msg); err != nil {
		t.Fatal(err)
	}
	_, out, errOut = run(t, "watch", "w1", "-o", "json", "--server", url, "--timeout", "10s")
	outs["watch -o json"] = out
	if !strings.Contains(out, `"reason":"x\u009b2J \ufffd2J"`) {
		t.Errorf("watch -o json: the reason is not as JSON escapes: %s%s", out, errOut)
	}

	for what, out := range outs {
		assertTermSafe(t, what, out, false)
		if !strings.Contains(out, `\u009b`) {
			t.Errorf("%s: no C1 control escaped in %q", what, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(l, "{") && strings.HasSuffix(l, "}") && !json.Valid([]byte(l)) {
				t.Errorf("%s: not JSON: %s", what, l)
			}
		}
	}
}
