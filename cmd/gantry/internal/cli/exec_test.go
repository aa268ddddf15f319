package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

const execInventory = `all:
  hosts:
    bastion: {ansible_host: 10.0.0.1}
  children:
    web:
      hosts:
        web-1: {ansible_host: 10.0.0.11, ansible_ssh_common_args: -J bastion}
        web-2: {ansible_host: 10.0.0.12}
        web-3: {ansible_host: 10.0.0.13}
    db:
      hosts:
        db-1: {ansible_host: 10.0.0.21, ansible_connection: local}
`

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExecComposition: the composition gantry exec sends runs the command
// on each matched host as an instance of its own, always (reset), without
// one host's failure stopping the others, with --forks as a limit on the
// group, --become on the node, and the jump hosts of the matched hosts.
func TestExecComposition(t *testing.T) {
	inv := writeFile(t, "hosts.yaml", execInventory)
	o := execOptions{forks: 2, become: true, becomeSet: true, becomeUser: "app"}
	cmdText := `echo "{{ .Host }}" {{{x}}} $GANTRY_HOST`
	ex, err := prepareExec(&bytes.Buffer{}, []string{inv, "web:!web-2", cmdText}, o)
	if err != nil {
		t.Fatal(err)
	}
	c, err := composition.Load("exec.json", ex.data)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Name, "exec-") || !c.Reset || c.OnFailure != dag.OnFailureContinue {
		t.Errorf("name %q reset %v on_failure %q", c.Name, c.Reset, c.OnFailure)
	}
	if len(c.Hosts) != 3 || c.Hosts["bastion"].Address != "10.0.0.1:22" || c.Hosts["web-1"].Via != "bastion" {
		t.Errorf("hosts: %+v", c.Hosts)
	}
	if len(c.Limits) != 1 || c.Limits[0].Group != execGroup || c.Limits[0].MaxParallel != 2 {
		t.Errorf("limits: %+v", c.Limits)
	}
	if len(c.Formulas) != 2 {
		t.Fatalf("formulas: %+v", c.Formulas)
	}
	for i, host := range []string{"web-1", "web-3"} {
		f := c.Formulas[i]
		n := f.Nodes[0]
		if f.ID != "exec-"+host || f.Server != host || ex.byID[f.ID] != host || n.Name != execNode {
			t.Errorf("formula %d: %s on %s, node %s", i, f.ID, f.Server, n.Name)
		}
		if n.Run != cmdText {
			t.Errorf("%s: run %q, want the command as written %q", host, n.Run, cmdText)
		}
		if n.Env[execHostEnv].Text != host {
			t.Errorf("%s: GANTRY_HOST=%q", host, n.Env[execHostEnv].Text)
		}
		if n.Become == nil || !*n.Become || n.BecomeUser != "app" {
			t.Errorf("%s: become %v %q", host, n.Become, n.BecomeUser)
		}
	}
	// The same exec has the same name; another command, pattern or
	// --become another.
	again, _ := prepareExec(&bytes.Buffer{}, []string{inv, "web:!web-2", cmdText}, o)
	other, _ := prepareExec(&bytes.Buffer{}, []string{inv, "web:!web-2", "uptime"}, o)
	if again.name != ex.name || other.name == ex.name {
		t.Errorf("names: %s, again %s, other command %s", ex.name, again.name, other.name)
	}
}

// TestExecLiteralCommand: whatever braces a command has, it renders as
// itself on every host.
func TestExecLiteralCommand(t *testing.T) {
	for _, text := range []string{
		"uptime", "{{", "}}", "{{{{", "{{ .Host }}", `{{"{{"}}`, "{{- /* x */ -}}", "{{ template \"x\" }}",
		"docker inspect --format '{{.State.Status}}' app", "a{{b}}c{{", "{{ range 1000000000 }}x{{ end }}",
	} {
		c := &dag.Composition{Name: "t", Hosts: map[string]dag.Host{"h": {Address: "10.0.0.1"}},
			Groups:   map[string]dag.Group{execGroup: {Hosts: []string{"h"}}},
			Formulas: []dag.Formula{{ID: execFormula, Group: execGroup, Nodes: []dag.Node{execOptions{}.node(text)}}}}
		ex, err := checkExec(&bytes.Buffer{}, c, text)
		if err != nil {
			t.Errorf("%q: %v", text, err)
			continue
		}
		loaded, _ := composition.Load("exec.json", ex.data)
		if got := loaded.Formulas[0].Nodes[0].Run; got != text {
			t.Errorf("%q rendered as %q", text, got)
		}
	}
}

// TestExecPatterns: which hosts patterns select of an inventory (INI or
// YAML) and of a composition, and what matches nothing (exit 2, naming it and the
// groups).
func TestExecPatterns(t *testing.T) {
	inv := writeFile(t, "hosts.yaml", execInventory)
	comp := writeFile(t, "fleet.yaml", `name: f
hosts:
  a-1: {address: 10.0.0.1, labels: {role: app}}
  a-2: {address: 10.0.0.2, labels: {role: app}}
  b-1: {address: 10.0.0.3}
groups:
  app: {labels: {role: app}}
  odd: {hosts: [a-1, b-1]}
formulas:
  - {id: x, server: b-1, nodes: [{name: n, run: "true"}]}
`)
	ini := writeFile(t, "hosts.ini", "[web]\nweb-[1:3] ansible_host=10.0.0.1\n[db]\ndb-1\n[prod:children]\nweb\n")
	for _, tc := range []struct{ file, pattern, limit, want string }{
		{ini, "prod:!web-2", "", "web-1 web-3"},
		{ini, "all", "~(db|web-3)", "db-1 web-3"},
		{inv, "web", "", "web-1 web-2 web-3"},
		{inv, "all", "", "bastion db-1 web-1 web-2 web-3"},
		{inv, "web-*:db", "", "db-1 web-1 web-2 web-3"},
		{inv, "web", "web-[12]", "web-1 web-2"},
		{inv, "ungrouped", "", "bastion"},
		{comp, "app", "", "a-1 a-2"},
		{comp, "app:&odd", "", "a-1"},
		{comp, "all:!app", "", "b-1"},
	} {
		f, err := readFleet(&bytes.Buffer{}, tc.file)
		if err != nil {
			t.Fatal(err)
		}
		hosts, err := selectHosts(f, tc.pattern, tc.limit)
		if err != nil || strings.Join(hosts, " ") != tc.want {
			t.Errorf("%s %q --limit %q: %v %v, want %s", filepath.Base(tc.file), tc.pattern, tc.limit, hosts, err, tc.want)
		}
	}
	f, _ := readFleet(&bytes.Buffer{}, inv)
	for _, tc := range []struct{ pattern, limit, want string }{
		{"webz", "", `host pattern: "webz" matches no host or group of the inventory (its groups: db, ungrouped, web; it has 5 host(s)): nothing to run`},
		{"web:&db", "", `host pattern: "web:&db" matches no host: nothing to run`},
		{"web", "db", `--limit "db" leaves none of the hosts "web" matches: nothing to run`},
		{"web-[", "", `host pattern: host pattern "web-[": bad glob`},
	} {
		_, err := selectHosts(f, tc.pattern, tc.limit)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q --limit %q: %v, want exit 2 with %q", tc.pattern, tc.limit, err, tc.want)
		}
	}
}

// TestExecCommandLine: what gantry exec refuses before it reads anything
// or connects: exit 2, or 3 for an inventory it cannot read, 1 for one
// with problems (with their file and line).
func TestExecCommandLine(t *testing.T) {
	inv := writeFile(t, "hosts.yaml", execInventory)
	bad := writeFile(t, "bad.yaml", "all:\n  hosts:\n    web-1: {ansible_port: 99999}\n")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"exec", inv, "web", "uptime"}, ExitUsage, "put the command after --"},
		{[]string{"exec", inv, "--", "uptime"}, ExitUsage, "gantry: exec wants INVENTORY PATTERN -- COMMAND"}, // said once, not "gantry: gantry exec: exec wants"
		{[]string{"exec", inv, "web"}, ExitUsage, "gantry: exec wants INVENTORY PATTERN -- COMMAND"},
		{[]string{"exec", inv, "web", "--", " "}, ExitUsage, "the command after -- is empty"},
		{[]string{"exec", inv, "web", "--forks", "-1", "--", "uptime"}, ExitUsage, "--forks -1"},
		{[]string{"exec", inv, "nope", "--", "uptime"}, ExitUsage, `"nope" matches no host or group`},
		{[]string{"exec", inv, "web", "-o", "toml", "--", "uptime"}, ExitUsage, `unknown -o "toml"`},
		{[]string{"exec", filepath.Join(t.TempDir(), "missing"), "web", "--", "uptime"}, ExitProblem, "no such file"},
		{[]string{"exec", bad, "web-1", "--", "uptime"}, ExitFailed, bad + ":3: "},
	} {
		code, out, errOut := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tc.args[1:], code, tc.code, tc.want, out, errOut)
		}
	}
}

// TestOutputComplete: a host's output lines are all in when each stream
// ends as its tail does.
func TestOutputComplete(t *testing.T) {
	out := func(s ...string) []outputLine {
		var ls []outputLine
		for _, x := range s {
			stream, line, _ := strings.Cut(x, ":")
			ls = append(ls, outputLine{Stream: stream, Line: line})
		}
		return ls
	}
	long := strings.Repeat("x", events.MaxTailBytes-3) + "\nend\n" // cut: its first line may be partial
	for _, tc := range []struct {
		name  string
		lines []outputLine
		tails [2]string
		want  bool
	}{
		{"no output", nil, [2]string{}, true},
		{"all in", out("stdout:a", "stderr:e", "stdout:b"), [2]string{"a\nb\n", "e\n"}, true},
		{"no newline at the end", out("stdout:a", "stdout:b"), [2]string{"a\nb", ""}, true},
		{"stdout missing its last", out("stdout:a", "stderr:e"), [2]string{"a\nb\n", "e\n"}, false},
		{"stderr not in", out("stdout:a"), [2]string{"a\n", "e\n"}, false},
		{"a repeated line not all in", out("stdout:x"), [2]string{"x\nx\n", ""}, false},
		{"empty lines", out("stdout:", "stdout:a", "stdout:"), [2]string{"\na\n\n", ""}, true},
		{"more before the tail", out("stdout:0", "stdout:a"), [2]string{"a\n", ""}, true},
		{"cut tail", out("stdout:whatever", "stdout:end"), [2]string{long, ""}, true},
		{"nothing yet", nil, [2]string{"a\n", ""}, false},
	} {
		if got := outputComplete(tc.lines, tc.tails); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestExecInventoryWarnings: what gantry inventory warns about (a secret
// written in the inventory, left out) exec says too, never the value.
func TestExecInventoryWarnings(t *testing.T) {
	inv := writeFile(t, "hosts.ini", "[web]\nweb-1 ansible_host=10.0.0.1 db_password=hunter2\n")
	var stderr bytes.Buffer
	f, err := readFleet(&stderr, inv)
	if err != nil {
		t.Fatal(err)
	}
	if _, kept := f.Hosts["web-1"].Vars["db_password"]; kept || !strings.Contains(stderr.String(), inv+":2: ") ||
		!strings.Contains(stderr.String(), "warning: ") || strings.Contains(stderr.String(), "hunter2") {
		t.Errorf("vars %v, stderr:\n%s", f.Hosts["web-1"].Vars, stderr.String())
	}
}

// --var and --var-file on exec are recorded with the workflow as its
// extra_vars, as on submit.
func TestExecRecordsVars(t *testing.T) {
	inv := writeFile(t, "hosts.yaml", execInventory)
	o := execOptions{vars: &varFlags{vars: []string{"env=prod", "db_password=hunter2"}}}
	ex, err := prepareExec(&bytes.Buffer{}, []string{inv, "web-1", "uptime"}, o)
	if err != nil {
		t.Fatal(err)
	}
	c, err := composition.Load("exec.json", ex.data)
	if err != nil {
		t.Fatal(err)
	}
	if c.ExtraVars["env"] != "prod" || c.ExtraVars["db_password"] != "hunter2" {
		t.Errorf("extra_vars sent %v, want env and db_password from --var", c.ExtraVars)
	}
}
