package cli

import (
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// varsDir writes a composition taking its host from an inventory, each
// giving vars, and two var files.
func varsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"c.yaml": `name: prec
inventory: inv.yaml
vars: {a: comp, b: comp, c: comp, d: comp, e: comp}
formulas:
  - id: f
    server: h1
    nodes: [{name: n, run: "echo {{ .Vars.a }} {{ .Vars.b }} {{ .Vars.c }} {{ .Vars.d }} {{ .Vars.e }}"}]
`,
		"inv.yaml":   "all:\n  hosts:\n    h1: {ansible_connection: local, b: inv, c: inv, d: inv, e: inv}\n",
		"v1.yaml":    "c: file1\nd: file1\ne: file1\n",
		"v2.json":    `{"d": "file2", "e": 2}`,
		"list.yaml":  "- a\n- b\n",
		"bad.yaml":   "a: [1]\nb: {x: 1}\n9x: 1\nc:\n",
		"plain.yaml": "name: plain\nhosts: {me: {transport: local}}\nformulas: [{id: f, server: me, nodes: [{name: n, run: 'echo {{ .Vars.x }}'}]}]\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Vars: the composition's < the inventory's < each --var-file in order <
// --var, in what gantry plan and validate show.
func TestVarPrecedence(t *testing.T) {
	t.Parallel()
	dir := varsDir(t)
	c := filepath.Join(dir, "c.yaml")
	cases := []struct {
		args []string
		want string
	}{
		{nil, "echo comp inv inv inv inv"},
		{[]string{"--var-file", filepath.Join(dir, "v1.yaml")}, "echo comp inv file1 file1 file1"},
		{[]string{"--var-file", filepath.Join(dir, "v1.yaml"), "--var-file", filepath.Join(dir, "v2.json")}, "echo comp inv file1 file2 2"},
		{[]string{"--var", "e=flag", "--var-file", filepath.Join(dir, "v1.yaml"), "--var-file", filepath.Join(dir, "v2.json")}, "echo comp inv file1 file2 flag"},
		{[]string{"--var", "e=one", "--var", "e=two=2"}, "echo comp inv inv inv two=2"},
	}
	for _, tc := range cases {
		code, out, errOut := run(t, append([]string{"plan", c}, tc.args...)...)
		if code != ExitOK || !strings.Contains(out, "1. n: "+tc.want+"\n") {
			t.Errorf("plan %v: exit %d, want %q\n%s%s", tc.args, code, tc.want, out, errOut)
		}
	}
	code, out, errOut := run(t, "validate", filepath.Join(dir, "plain.yaml"), "--var", "x=1")
	if code != ExitOK || !strings.Contains(out, "valid") {
		t.Errorf("validate with the var a template needs: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = run(t, "validate", filepath.Join(dir, "plain.yaml"))
	if code != ExitFailed || !strings.Contains(errOut, `var "x" is not set`) {
		t.Errorf("validate without it: exit %d\n%s", code, errOut)
	}
}

// What submit sends carries the vars as extra_vars, over any the file has;
// applyTo sets them on a composition built in code.
func TestVarsSentWithTheComposition(t *testing.T) {
	t.Parallel()
	dir := varsDir(t)
	vf := &varFlags{vars: []string{"d=flag", "db_password=hunter2"}, files: []string{filepath.Join(dir, "v1.yaml")}}
	data, err := vf.readForSubmit(io.Discard, filepath.Join(dir, "c.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Inventory string            `json:"inventory"`
		ExtraVars map[string]string `json:"extra_vars"`
		Hosts     map[string]any    `json:"hosts"`
	}
	if err := json.Unmarshal(data, &sent); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, data)
	}
	want := map[string]string{"c": "file1", "d": "flag", "e": "file1", "db_password": "hunter2"}
	if !maps.Equal(sent.ExtraVars, want) || sent.Inventory != "" || sent.Hosts["h1"] == nil {
		t.Errorf("sent %s", data)
	}
	c := &dag.Composition{ExtraVars: map[string]string{"d": "old", "z": "kept"}}
	if err := vf.applyTo(c); err != nil {
		t.Fatal(err)
	}
	if c.ExtraVars["d"] != "flag" || c.ExtraVars["z"] != "kept" || c.ExtraVars["c"] != "file1" {
		t.Errorf("applyTo: %v", c.ExtraVars)
	}
	if got := varsText(map[string]string{"env": "prod", "db_password": "hunter2"}); got != "db_password=***, env=prod" {
		t.Errorf("varsText %q", got)
	}
}

// Bad --var and --var-file are refused naming the flag or the file (and
// line), never showing what may be a value.
func TestVarFlagErrors(t *testing.T) {
	t.Parallel()
	dir := varsDir(t)
	c := filepath.Join(dir, "c.yaml")
	f := func(name string) string { return filepath.Join(dir, name) }
	cases := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--var", "foo"}, ExitUsage, []string{"--var foo: want name=value (no '=')"}},
		{[]string{"--var", "db_password:hunter2"}, ExitUsage, []string{"--var: want name=value, got an argument of 19 characters without '='"}},
		{[]string{"--var", "9a=1"}, ExitUsage, []string{`--var: var name "9a" is not a name`}},
		{[]string{"--var", "=1"}, ExitUsage, []string{"--var: a var needs a name"}},
		{[]string{"--var-file", f("list.yaml")}, ExitFailed, []string{"--var-file " + f("list.yaml") + ":1: expected a mapping of var names to values, got a list"}},
		{[]string{"--var-file", f("bad.yaml")}, ExitFailed, []string{
			"--var-file " + f("bad.yaml") + ":1: a: expected a string, number or boolean, got a list",
			"--var-file " + f("bad.yaml") + ":2: b: expected a string, number or boolean, got a mapping",
			"--var-file " + f("bad.yaml") + `:3: var name "9x" is not a name`,
			"--var-file " + f("bad.yaml") + ":4: c: expected a string, number or boolean, got nothing (null)"}},
		{[]string{"--var-file", f("nope.yaml")}, ExitProblem, []string{"--var-file " + f("nope.yaml") + ": open " + f("nope.yaml") + ": no such file or directory"}},
	}
	for _, tc := range cases {
		for _, verb := range []string{"validate", "plan", "submit", "drift"} {
			args := append([]string{verb, c}, tc.args...)
			if verb == "submit" || verb == "drift" {
				args = append(args, "--server", "nats://127.0.0.1:1") // the vars are read first
			}
			code, out, errOut := run(t, args...)
			if code != tc.code {
				t.Errorf("%s %v: exit %d, want %d\n%s%s", verb, tc.args, code, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("%s %v: want %q in\n%s", verb, tc.args, w, errOut)
				}
			}
			if strings.Contains(out+errOut, "hunter2") {
				t.Errorf("%s %v printed a value:\n%s%s", verb, tc.args, out, errOut)
			}
		}
	}
}

// gantry status shows the vars a workflow was submitted with.
func TestStatusShowsVars(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	d := &events.WorkflowDoc{Workflow: "w", WorkflowID: "w1", Status: dag.WorkflowSucceeded, Vars: map[string]string{"env": "prod", "db_password": "***"}}
	if err := statusTable(&b, d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "  vars (--var, --var-file): db_password=***, env=prod\n") {
		t.Errorf("status:\n%s", b.String())
	}
}
