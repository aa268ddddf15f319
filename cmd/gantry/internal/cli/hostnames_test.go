package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// gantry logs ID HOST takes a host by its name, dots and all, and reads
// that host's log subject, which carries its host token.
func TestLogsSelectsAHostByName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		arg     string
		want    nodeSel
		subject string
		bad     string
	}{
		{arg: "10.0.0.5", want: nodeSel{host: "10.0.0.5"}, subject: "decky.10_0_0_5.logs.*"},
		{arg: "web-1.example.com", want: nodeSel{host: "web-1.example.com"}, subject: "decky.web-1_example_com.logs.*"},
		{arg: "cp-0", want: nodeSel{name: "cp-0"}, subject: "decky.*.logs.*"}, // a formula or a host: check resolves it
		{arg: "app/conf", want: nodeSel{formula: "app", node: "conf"}, subject: "decky.*.logs.conf"},
		{arg: "Web.example.com", bad: `"Web.example.com" is not FORMULA, FORMULA/NODE or a host name`},
		{arg: "a/b.c", bad: `"a/b.c" is not FORMULA, FORMULA/NODE`},
	}
	for _, tc := range cases {
		sel, err := parseNodeSel(tc.arg, "")
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%s: err %v, want %q", tc.arg, err, tc.bad)
			}
			continue
		}
		if err != nil || sel != tc.want {
			t.Fatalf("%s: %+v %v, want %+v", tc.arg, sel, err, tc.want)
		}
		doc := &events.WorkflowDoc{Status: dag.WorkflowRunning, Formulas: map[string]*events.FormulaDoc{}}
		if got := (logsQuery{sel: sel, doc: doc}).subjects(); !slices.Equal(got, []string{tc.subject}) {
			t.Errorf("%s: subjects %v, want %s", tc.arg, got, tc.subject)
		}
	}
	ll := &events.LogLine{Ref: events.Ref{Host: "10.0.0.5", Formula: "app", Node: "conf"}}
	if !(nodeSel{host: "10.0.0.5"}).match(ll) || (nodeSel{host: "10_0_0_5"}).match(ll) {
		t.Error("a host is matched by its name only")
	}
	done := &events.WorkflowDoc{Status: dag.WorkflowSucceeded, Formulas: map[string]*events.FormulaDoc{"app": {Host: "10.0.0.5"}}}
	if _, err := (nodeSel{host: "10.0.0.5"}).check(nil, "w1", done, false); err != nil {
		t.Errorf("a host of the workflow: %v", err)
	}
	_, err := (nodeSel{host: "10.0.0.6"}).check(nil, "w1", done, false)
	if err == nil || !strings.Contains(err.Error(), "workflow w1 ran nothing on host 10.0.0.6 (its hosts: 10.0.0.5)") {
		t.Errorf("another host: %v", err)
	}
}

// gantry state --host takes a host name with dots and refuses what is not
// one, as a usage error naming the flag.
func TestStateHostFlag(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, "state", "--host", "web..example.com", "--server", "nats://127.0.0.1:1")
	if code != ExitUsage || !strings.Contains(errOut, `--host: host name "web..example.com" has an empty part between dots`) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
