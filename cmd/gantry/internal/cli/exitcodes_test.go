package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// unreachable is a server no one listens on.
const unreachable = "nats://127.0.0.1:1"

// runnable is every command of gantry that runs (not the help topics),
// by its path without "gantry".
func runnable() []string {
	var out []string
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Name() != "help" && c.Name() != "__complete" && c.Name() != "__completeNoDesc" {
			out = append(out, strings.TrimPrefix(c.CommandPath(), "gantry "))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRoot()
	root.InitDefaultCompletionCmd()
	walk(root)
	return out
}

// sampleArgs are arguments each command that takes some accepts.
func sampleArgs(t *testing.T) map[string][]string {
	ok := compositionFile(t, "ok.yaml", twoFormulas)
	inv := compositionFile(t, "hosts.ini", "[web]\nweb-1 ansible_connection=local\n")
	m := map[string][]string{"drift": {ok}, "reconcile": {ok}, "submit": {ok}, "validate": {ok}, "plan": {ok}, "inventory": {inv},
		"exec": {inv, "web", "--", "true"}}
	for _, c := range idCommands {
		m[c] = []string{"w1"}
	}
	return m
}

// TestEveryCommandRefusesABadFlag: an unknown flag is exit 2 for every
// command, and so is an -o the command cannot print.
func TestEveryCommandRefusesABadFlag(t *testing.T) {
	t.Parallel()
	cmds := runnable()
	if len(cmds) < 25 {
		t.Fatalf("only %d commands found: %v", len(cmds), cmds)
	}
	for _, c := range cmds {
		args := append(strings.Fields(c), "--no-such-flag")
		if code, _, errOut := run(t, args...); code != ExitUsage || !strings.Contains(errOut, "unknown flag: --no-such-flag") {
			t.Errorf("gantry %s --no-such-flag: exit %d, want %d\n%s", c, code, ExitUsage, errOut)
		}
		cmd, _, _ := newRoot().Find(strings.Fields(c))
		if cmd.Flags().Lookup("output") == nil {
			continue
		}
		args = append(strings.Fields(c), "-o", "toml")
		if cmd.Flags().Lookup("server") != nil {
			args = append(args, "--server", unreachable)
		}
		args = append(args, sampleArgs(t)[c]...)
		if code, _, errOut := run(t, args...); code != ExitUsage || !strings.Contains(errOut, `unknown -o "toml"`) {
			t.Errorf("gantry %s -o toml: exit %d, want %d\n%s", c, code, ExitUsage, errOut)
		}
	}
}

// TestEveryPrintingCommandTakesJSONAndYAML: every command with -o takes
// json and yaml; the commands that print only text (the servers, and the
// completion scripts) are listed here on purpose.
func TestEveryPrintingCommandTakesJSONAndYAML(t *testing.T) {
	t.Parallel()
	textOnly := map[string]bool{"dev": true, "ui": true, "auth": true, "completion": true, "completion bash": true,
		"completion zsh": true, "completion fish": true, "completion powershell": true}
	for _, c := range runnable() {
		cmd, _, _ := newRoot().Find(strings.Fields(c))
		f := cmd.Flags().Lookup("output")
		switch {
		case textOnly[c] && f != nil:
			t.Errorf("gantry %s has -o: take it off the text-only list", c)
		case textOnly[c]:
		case f == nil:
			t.Errorf("gantry %s prints but has no -o json|yaml", c)
		case !strings.Contains(f.Usage, "json") || !strings.Contains(f.Usage, "yaml"):
			t.Errorf("gantry %s -o: %q, want json and yaml among them", c, f.Usage)
		}
	}
}

// TestExitCodes: the same exit code for the same outcome, whatever the
// command (gantry help exit-codes).
func TestExitCodes(t *testing.T) {
	t.Parallel()
	bad := compositionFile(t, "bad.yaml", "name: bad\nhosts: {h: {transport: local}}\nformulas:\n  - id: a\n    server: nowhere\n    nodes: [{name: n, run: 'true'}]\n")
	ok := compositionFile(t, "ok.yaml", twoFormulas)
	inv := compositionFile(t, "hosts.ini", "[web]\nweb-1 ansible_connection=local\n")
	badInv := compositionFile(t, "bad.ini", "[web\nweb-1\n")
	const missing = "/nonexistent/gantry.yaml"
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		// An input that cannot be read: 3.
		{[]string{"validate", missing}, ExitProblem, "no such file"},
		{[]string{"validate", ok, missing}, ExitProblem, "1 of 2 file(s) could not be read"},
		{[]string{"plan", missing}, ExitProblem, "no such file"},
		{[]string{"inventory", missing}, ExitProblem, "no such file"},
		{[]string{"submit", missing, "--server", unreachable}, ExitProblem, "no such file"},
		{[]string{"drift", missing, "--server", unreachable}, ExitProblem, "no such file"},
		{[]string{"reconcile", missing, "--server", unreachable}, ExitProblem, "no such file"},
		{[]string{"exec", missing, "all", "--server", unreachable, "--", "true"}, ExitProblem, "no such file"},
		{[]string{"validate", ok, "--var-file", missing}, ExitProblem, "no such file"},
		{[]string{"plan", ok, "--var-file", missing}, ExitProblem, "no such file"},
		{[]string{"submit", ok, "--var-file", missing, "--server", unreachable}, ExitProblem, "no such file"},
		// A server that cannot be reached: 3.
		{[]string{"submit", ok, "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"status", "w1", "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"list", "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"state", "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"watch", "w1", "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"logs", "w1", "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"cancel", "w1", "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"retry", "w1", "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"drift", ok, "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"ping", "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"prune", "--keep", "1", "--server", unreachable}, ExitProblem, "no servers available"},
		{[]string{"exec", inv, "web", "--server", unreachable, "--", "true"}, ExitProblem, "no servers available"},
		// Invalid input: 1.
		{[]string{"validate", bad}, ExitFailed, "1 of 1 file(s) invalid"},
		{[]string{"plan", bad}, ExitFailed, `server "nowhere" is not listed in hosts`},
		{[]string{"inventory", badInv}, ExitFailed, "bad.ini"},
		// Usage: 2.
		{[]string{"status"}, ExitUsage, "accepts 1 arg(s), received 0"},
		{[]string{"status", "a", "b"}, ExitUsage, "accepts 1 arg(s), received 2"},
		{[]string{"list", "x"}, ExitUsage, `unknown command "x"`},
		{[]string{"version", "x"}, ExitUsage, `unknown command "x"`},
		{[]string{"no-such-command"}, ExitUsage, `unknown command "no-such-command"`},
		{[]string{"plan", ok, "--format", "dot", "-o", "json"}, ExitUsage, "--format dot and -o json: give one of them"},
		{[]string{"submit", ok, "-q", "-o", "json", "--server", unreachable}, ExitUsage, "--quiet and -o"},
		{[]string{"logs", "w1", "--host", "Bad_Host", "--server", unreachable}, ExitUsage, `--host "Bad_Host" is not a host name`},
		{[]string{"state", "--timeout", "soon"}, ExitUsage, "invalid argument"},
		{[]string{"watch", "w1", "--timeout", "0s", "--server", unreachable}, ExitUsage, "--timeout 0s: give a time above 0"},
		// Done: 0.
		{[]string{"validate", ok}, ExitOK, ""},
		{[]string{"help", "exit-codes"}, ExitOK, ""},
	} {
		code, out, errOut := run(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("gantry %s: exit %d, want %d with %q\n%s%s", strings.Join(c.args, " "), code, c.code, c.want, out, errOut)
		}
	}
}

// TestExitCodesOfRuns: against a real dev stack, a run that succeeded
// exits 0, one that failed 1, a check that found changes 4, a rejected
// composition 1.
func TestExitCodesOfRuns(t *testing.T) {
	s := startDevStack(t)
	ok := compositionFile(t, "ok.yaml", twoFormulas)
	failing := compositionFile(t, "failing.yaml", "name: failing\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'exit 3'}]\n")
	check := compositionFile(t, "check.yaml", "name: check\noperation: check\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'true', check: 'false'}]\n")
	rejected := compositionFile(t, "rejected.json", `{"name": "rejected", "hosts": {"me": {"transport": "local"}}, "formulas": [{"id": "a", "server": "me", "nodes": [{"name": "n"}]}]}`)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"submit", ok, "--watch"}, ExitOK, "workflow two SUCCEEDED"},
		{[]string{"submit", failing, "--watch"}, ExitFailed, "workflow failing FAILED"},
		{[]string{"submit", check, "--watch"}, ExitChanges, "would change"},
		{[]string{"submit", rejected}, ExitFailed, "run is required"},
		{[]string{"status", "no-such-workflow"}, ExitFailed, "no workflow no-such-workflow"},
	} {
		code, out, errOut := s.gantry(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("gantry %s: exit %d, want %d with %q\n%s%s", strings.Join(c.args, " "), code, c.code, c.want, out, errOut)
		}
	}
	// What only an operator may do, asked as a viewer, is refused saying
	// so (it named the first read, state.workflow, which a viewer may
	// make), and a viewer's reads work.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cancel", "w1"}, ExitProblem, "this command is for operators"},
		{[]string{"pause", "w1"}, ExitProblem, "this command is for operators"},
		{[]string{"submit", ok}, ExitProblem, "this command is for operators"},
		{[]string{"status", "no-such-workflow"}, ExitFailed, "no workflow no-such-workflow"},
	} {
		code, out, errOut := run(t, s.as(s.viewer, c.args...)...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("gantry %s as a viewer: exit %d, want %d with %q\n%s%s", strings.Join(c.args, " "), code, c.code, c.want, out, errOut)
		}
	}
}

// gantry help exit-codes prints every code with what it means.
func TestHelpExitCodes(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, "help", "exit-codes")
	for _, want := range []string{"\n  0    done", "\n  1    the workflow failed", "\n  2    usage error", "\n  3    cannot read an input", "\n  4    an operation: check run found", "\n  130  interrupted"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("gantry help exit-codes: exit %d, lacks %q:\n%s", code, want, out)
		}
	}
}
