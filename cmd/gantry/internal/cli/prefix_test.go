package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/tracing"
)

// idCommands are the commands that take a workflow id.
var idCommands = []string{"status", "watch", "logs", "cancel", "pause", "resume", "retry"}

// TestEveryCommandTakesAnIDPrefix: against a real dev stack, a unique
// start of a workflow's id works for status, watch, logs and the control
// verbs alike; a start two ids share is a usage error (exit 2) listing
// both; one no id has is exit 1. Workflow ids are UUIDv7s, so those
// submitted in a row share their start.
func TestEveryCommandTakesAnIDPrefix(t *testing.T) {
	s := startDevStack(t)
	two := compositionFile(t, "two.yaml", twoFormulas)
	var ids []string
	for range 3 {
		ids = append(ids, s.submitted(t, two))
	}
	id := ids[0]
	p := uniquePrefix(id, ids)
	if code, out, errOut := s.gantry(t, "watch", p, "--timeout", "60s"); code != ExitOK {
		t.Fatalf("watch %s: exit %d\n%s%s", p, code, out, errOut)
	}
	code, out, errOut := s.gantry(t, "status", p)
	if code != ExitOK || !strings.Contains(out, "("+id+")") || strings.Index(out, "\na ") > strings.Index(out, "\nb ") {
		t.Errorf("status %s: exit %d, want %s's formulas a then b\n%s%s", p, code, id, out, errOut)
	}
	if code, out, errOut = s.gantry(t, "status", p, "-o", "yaml"); code != ExitOK || !strings.Contains(out, "workflow_id: "+id+"\n") {
		t.Errorf("status %s -o yaml: exit %d\n%s%s", p, code, out, errOut)
	}
	code, out, errOut = s.gantry(t, "logs", p, "a")
	if code != ExitOK || !strings.Contains(out, "line-of-a") || strings.Contains(out, "line-of-b") {
		t.Errorf("logs %s a (the whole formula a): exit %d\n%s%s", p, code, out, errOut)
	}
	code, out, errOut = s.gantry(t, "logs", p, "--host", "me")
	if code != ExitOK || !strings.Contains(out, "line-of-a") || !strings.Contains(out, "line-of-b") {
		t.Errorf("logs %s --host me: exit %d\n%s%s", p, code, out, errOut)
	}
	if code, _, errOut = s.gantry(t, "logs", p, "nosuch"); code != ExitFailed || !strings.Contains(errOut, "has no formula or host nosuch (its formulas: a, b)") {
		t.Errorf("logs %s nosuch: exit %d\n%s", p, code, errOut)
	}
	// The control verbs reach the planner about the whole id: a finished
	// workflow cannot be paused, resumed or cancelled, and this one
	// succeeded, so there is nothing to retry.
	for _, verb := range []string{"cancel", "pause", "resume", "retry"} {
		code, out, errOut = s.gantry(t, verb, p)
		if code != ExitFailed || !strings.Contains(errOut, verb+" "+id+":") {
			t.Errorf("%s %s: exit %d, want the planner's refusal about %s\n%s%s", verb, p, code, id, out, errOut)
		}
	}
	shared, both := sharedPrefix(ids)
	for _, c := range idCommands {
		code, out, errOut = s.gantry(t, c, shared)
		if code != ExitUsage || !strings.Contains(errOut, `"`+shared+`" starts the ids of `) || !strings.Contains(errOut, both[0]) || !strings.Contains(errOut, both[1]) {
			t.Errorf("%s %s (the start of %v): exit %d, want %d listing both\n%s%s", c, shared, both, code, ExitUsage, out, errOut)
		}
		code, out, errOut = s.gantry(t, c, "nosuch")
		if code != ExitFailed || !strings.Contains(errOut, "no workflow nosuch") {
			t.Errorf("%s nosuch: exit %d, want %d\n%s%s", c, code, ExitFailed, out, errOut)
		}
	}
}

// TestControlVerbsByPrefix: pause, resume and cancel of a running
// workflow, each given a start of its id.
func TestControlVerbsByPrefix(t *testing.T) {
	s := startDevStack(t)
	slow := compositionFile(t, "slow.yaml", "name: slow\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: sleep 60}]\n")
	id := s.submitted(t, slow)
	p := id[:8]
	for _, c := range []struct{ verb, want string }{{"pause", "paused"}, {"resume", "running"}, {"cancel", ""}} {
		code, out, errOut := s.gantry(t, c.verb, p, "-o", "json")
		if code != ExitOK || !strings.Contains(out, `"workflow_id": "`+id+`"`) || !strings.Contains(out, `"status": "`+c.want) {
			t.Errorf("%s %s: exit %d\n%s%s", c.verb, p, code, out, errOut)
		}
	}
	if code, out, errOut := s.gantry(t, "watch", p, "--timeout", "60s"); code != ExitFailed || !strings.Contains(out, "CANCELLED") {
		t.Errorf("watch %s after cancel: exit %d\n%s%s", p, code, out, errOut)
	}
}

// TestSubmitAndStatusShowTheTrace: with OTEL_TRACES_EXPORTER=console,
// gantry submit prints its "gantry submit" span (on stderr) and the
// workflow's trace id; gantry status shows the same trace id, and
// -o json has it.
func TestSubmitAndStatusShowTheTrace(t *testing.T) {
	s := startDevStack(t)
	var spans bytes.Buffer
	was := tracing.Console
	tracing.Console = &spans
	t.Cleanup(func() { tracing.Console = was })
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("TRACEPARENT", "")
	t.Setenv(tracing.ExporterEnv, "console")
	two := compositionFile(t, "two.yaml", twoFormulas)
	code, out, errOut := s.gantry(t, "submit", two)
	m := regexp.MustCompile(`(?m)^accepted (\S+) .*\ntrace ([0-9a-f]{32})$`).FindStringSubmatch(out)
	if code != ExitOK || m == nil {
		t.Fatalf("submit: exit %d, want the id and the trace\n%s%s", code, out, errOut)
	}
	id, trace := m[1], m[2]
	if !strings.Contains(spans.String(), `"Name":"gantry submit"`) || !strings.Contains(spans.String(), `"TraceID":"`+trace+`"`) {
		t.Errorf("no submit span of trace %s printed:\n%s", trace, spans.String())
	}
	if code, out, errOut = s.gantry(t, "watch", id, "--timeout", "60s"); code != ExitOK {
		t.Fatalf("watch: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = s.gantry(t, "status", id); code != ExitOK || !strings.Contains(out, "\n  trace "+trace+"\n") {
		t.Errorf("status: exit %d, want trace %s\n%s%s", code, trace, out, errOut)
	}
	if code, out, _ = s.gantry(t, "status", id, "-o", "json"); code != ExitOK || !strings.Contains(out, `"trace_id": "`+trace+`"`) {
		t.Errorf("status -o json: exit %d, want trace_id %s\n%s", code, trace, out)
	}
	if code, out, _ = s.gantry(t, "submit", two, "-o", "json"); code != ExitOK || !strings.Contains(out, `"trace_id": "`) || !strings.Contains(out, `"status": "accepted"`) {
		t.Errorf("submit -o json: exit %d\n%s", code, out)
	}
}

// TestCompletionAsksTheServer: shell completion offers the server's
// workflow ids (with their names and states), a workflow's formulas and
// nodes, its hosts for --host, and its nodes for retry --node.
func TestCompletionAsksTheServer(t *testing.T) {
	s := startDevStack(t)
	id := s.submitted(t, compositionFile(t, "two.yaml", twoFormulas))
	if code, out, errOut := s.gantry(t, "watch", id, "--timeout", "60s"); code != ExitOK {
		t.Fatalf("watch: exit %d\n%s%s", code, out, errOut)
	}
	complete := func(args ...string) []string {
		t.Helper()
		toComplete := args[len(args)-1]
		args = append(append(s.as(s.viewer, "__complete", args[0]), args[1:len(args)-1]...), toComplete) // the connection's flags first, the flag being completed last
		code, out, errOut := run(t, args...)
		if code != ExitOK {
			t.Fatalf("gantry %v: exit %d\n%s", args, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return lines[:len(lines)-1] // the last is the directive (":4")
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"status", id[:4]}, []string{id + "\ttwo succeeded"}},
		{[]string{"cancel", ""}, []string{id + "\ttwo succeeded"}},
		{[]string{"logs", id[:8], ""}, []string{"a", "b", "a/n", "b/m"}},
		{[]string{"logs", id, "a"}, []string{"a", "a/n"}},
		{[]string{"logs", id, "--host", ""}, []string{"me"}},
		{[]string{"retry", id, "--node", "b"}, []string{"b/m"}},
		{[]string{"state", "--host", ""}, []string{"me"}},
		{[]string{"status", "-o", ""}, []string{"table", "json", "yaml"}},
	} {
		if got := complete(c.args...); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("completion of %q: %q, want %q", c.args, got, c.want)
		}
	}
}
