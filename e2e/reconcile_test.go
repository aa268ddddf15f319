package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// cli runs the gantry binary against the stack as the operator and
// returns its exit code and output.
func (s *stack) cli(bin string, args ...string) (int, string) {
	s.t.Helper()
	cmd := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, isExit := err.(*exec.ExitError); isExit {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatal(err)
	}
	return code, string(out)
}

func writeJSON(t *testing.T, path string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// marked is a node that appends "<formula>/<name>" to its host's markers
// (and "delete <formula>/<name>" when deleted).
func marked(h *sshtest.Host, formula, name string) dag.Node {
	m := h.Dir + "/markers"
	return dag.Node{Name: name, Run: fmt.Sprintf("echo %s/%s >> %s", formula, name, m), Delete: fmt.Sprintf("echo delete %s/%s >> %s", formula, name, m)}
}

// base on h0 (gated), app on h1 on base, tools on h1 alone.
func reconcileComp(f *sshtest.Fleet) *dag.Composition {
	h0, h1 := f.Hosts[0], f.Hosts[1]
	return &dag.Composition{Name: "recon",
		Hosts: map[string]dag.Host{"h0": {Address: h0.Addr, User: f.User}, "h1": {Address: h1.Addr, User: f.User}},
		Formulas: []dag.Formula{
			{ID: "base", Server: "h0", Nodes: []dag.Node{marked(h0, "base", "a"), marked(h0, "base", "b")},
				HealthGate: &dag.HealthGate{Check: "grep -q base/b " + h0.Dir + "/markers", Timeout: dag.Duration(5 * time.Second), Retries: 2}},
			{ID: "app", Server: "h1", DependsOn: []dag.FormulaDep{{Formula: "base"}},
				Nodes: []dag.Node{marked(h1, "app", "c"), marked(h1, "app", "d"), marked(h1, "app", "old")}},
			{ID: "tools", Server: "h1", Nodes: []dag.Node{marked(h1, "tools", "e")}},
		}}
}

// gantry reconcile --records runs exactly what the records call missing or changed:
// after a run, one node's command is edited (app/d), one formula's node is
// deleted (tools/e, by a delete with targets) and one node is dropped from
// the composition (app/old). Reconcile runs app/d's new command and
// tools/e again, and nothing else: not app/c (in the targeted formula, in
// place), not base (a prerequisite, in place; only its gate is checked),
// and it leaves app/old alone, saying it is orphaned. The hosts' marker
// files show what ran.
func TestReconcileRunsOnlyWhatDrifted(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 2})
	bin := buildGantry(t)
	dir := t.TempDir()
	h0, h1 := s.fleet.Hosts[0], s.fleet.Hosts[1]
	v1 := writeJSON(t, filepath.Join(dir, "v1.json"), reconcileComp(s.fleet))
	if code, out := s.cli(bin, "submit", v1, "--watch"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	if code, out := s.cli(bin, "reconcile", v1, "--records"); code != 0 || !strings.Contains(out, "0 changed, 0 missing, 0 orphaned") || !strings.Contains(out, "nothing to reconcile") {
		t.Fatalf("reconcile right after the run: exit %d\n%s", code, out)
	}
	del := reconcileComp(s.fleet)
	del.Operation, del.Targets = dag.OpDelete, []string{"tools"}
	if d := s.wait(s.mustSubmit(del), 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("delete of tools: %s", d.Status)
	}
	v2c := reconcileComp(s.fleet)
	v2c.Formulas[1].Nodes[1].Run = "echo app/d-v2 >> " + h1.Dir + "/markers"
	v2c.Formulas[1].Nodes = v2c.Formulas[1].Nodes[:2]
	v2 := writeJSON(t, filepath.Join(dir, "v2.json"), v2c)

	before0, before1 := markers(t, h0), markers(t, h1)
	code, out := s.cli(bin, "reconcile", v2, "--records", "--dry-run")
	for _, want := range []string{"drift of recon: 3 ok, 1 changed, 1 missing, 1 orphaned", "changed  h1 app/d", "missing  h1 tools/e",
		"orphaned h1 app/old", "orphaned: not in the composition any more; run a delete to remove them",
		"would run: app/d (changed on h1), tools/e (missing on h1)", "with targets app, tools: formulas base, app, tools", "dry run: nothing was submitted"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("reconcile --dry-run: exit %d, no %q\n%s", code, want, out)
		}
	}
	v2t := v2c
	v2t.Targets = []string{"app"}
	if code, out := s.cli(bin, "reconcile", writeJSON(t, filepath.Join(dir, "v2t.json"), v2t)); code != 1 || !strings.Contains(out, "v2t.json: targets: reconcile chooses the targets itself") {
		t.Fatalf("reconcile of a composition with targets: exit %d\n%s", code, out)
	}
	if a, b := markers(t, h0), markers(t, h1); fmt.Sprint(a) != fmt.Sprint(before0) || fmt.Sprint(b) != fmt.Sprint(before1) {
		t.Fatalf("a dry run (or a refused reconcile) ran something: %v %v", a, b)
	}

	code, out = s.cli(bin, "reconcile", v2, "--records", "--watch")
	if code != 0 || !strings.Contains(out, "reconciling with targets app, tools") || !strings.Contains(out, "workflow recon SUCCEEDED") {
		t.Fatalf("reconcile --watch: exit %d\n%s", code, out)
	}
	t.Logf("gantry reconcile --watch:\n%s", out)
	want0 := map[string]int{"base/a": 1, "base/b": 1}
	want1 := map[string]int{"app/c": 1, "app/d": 1, "app/old": 1, "tools/e": 2, "delete tools/e": 1, "app/d-v2": 1}
	if got := markers(t, h0); fmt.Sprint(got) != fmt.Sprint(want0) {
		t.Errorf("h0 ran %v, want %v", got, want0)
	}
	if got := markers(t, h1); fmt.Sprint(got) != fmt.Sprint(want1) {
		t.Errorf("h1 ran %v, want %v", got, want1)
	}
	if code, out := s.cli(bin, "reconcile", v2, "--records"); code != 0 || !strings.Contains(out, "5 ok, 0 changed, 0 missing, 1 orphaned") || !strings.Contains(out, "nothing to reconcile") {
		t.Fatalf("reconcile after reconciling: exit %d\n%s", code, out)
	}
}

// gantry retry --node re-runs only the named failed nodes and what depends
// on them: of three failures (f1/x and f2/y2, fixed on the host meanwhile,
// and f2/y, still broken), retrying f1/x and f2/y2 runs them and f3
// (blocked behind f1), and not y, though its formula f2 runs again; the
// workflow still ends failed, and y stays failed. A node that did not fail
// or does not exist is refused, and nothing starts.
func TestCLIRetryNode(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	bin := buildGantry(t)
	h := s.fleet.Hosts[0]
	m := h.Dir + "/markers"
	c := &dag.Composition{Name: "retrynode", OnFailure: dag.OnFailureContinue,
		Hosts: map[string]dag.Host{"h": {Address: h.Addr, User: s.fleet.User}},
		Formulas: []dag.Formula{
			{ID: "f1", Server: "h", Nodes: []dag.Node{{Name: "x", Run: fmt.Sprintf("echo f1/x >> %s; test -f %s/fixed", m, h.Dir)}}},
			{ID: "f2", Server: "h", MaxParallel: 2, Nodes: []dag.Node{
				{Name: "y", Run: fmt.Sprintf("echo f2/y >> %s; false", m), DependsOn: []string{}},
				{Name: "y2", Run: fmt.Sprintf("echo f2/y2 >> %s; test -f %s/fixed", m, h.Dir), DependsOn: []string{}}}},
			{ID: "f3", Server: "h", DependsOn: []dag.FormulaDep{{Formula: "f1"}}, Nodes: []dag.Node{marked(h, "f3", "z")}},
		}}
	file := writeJSON(t, filepath.Join(t.TempDir(), "c.json"), c)
	code, out := s.cli(bin, "submit", file, "--watch")
	if code != 1 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]
	if got := markers(t, h); fmt.Sprint(got) != fmt.Sprint(map[string]int{"f1/x": 1, "f2/y": 1, "f2/y2": 1}) {
		t.Fatalf("first run ran %v", got)
	}
	for _, bad := range []struct{ node, want string }{
		{"f3/z", "f3/z: it did not fail (never ran)"},
		{"f1/nope", "f1/nope: formula f1 has no node nope"},
		{"nope/x", "nope/x: the workflow has no formula nope"},
		{"f1.x", `"f1.x": name it as formula/node`},
	} {
		if code, out := s.cli(bin, "retry", id, "--node", bad.node); code != 1 || !strings.Contains(out, bad.want) {
			t.Fatalf("retry --node %s: exit %d, want 1 and %q\n%s", bad.node, code, bad.want, out)
		}
	}
	if err := os.WriteFile(h.Dir+"/fixed", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out = s.cli(bin, "retry", id, "--node", "f1/x", "--node", "f2/y2", "--watch")
	if code != 1 || !strings.Contains(out, id+": running (generation 2)") || !strings.Contains(out, "workflow retrynode FAILED (run 2)") {
		t.Fatalf("retry --node f1/x: exit %d\n%s", code, out)
	}
	t.Logf("gantry retry --node f1/x --watch:\n%s", out)
	if got, want := markers(t, h), map[string]int{"f1/x": 2, "f2/y": 1, "f2/y2": 2, "f3/z": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the retry ran %v, want %v", got, want)
	}
	// The state shows y failed still, and x and z done.
	code, out = s.cli(bin, "state", "--host", "h")
	for _, row := range []string{`h +retrynode +f2 +y +failed`, `h +retrynode +f2 +y2 +succeeded`, `h +retrynode +f1 +x +succeeded`, `h +retrynode +f3 +z +succeeded`} {
		if code != 0 || !regexp.MustCompile(row).MatchString(out) {
			t.Fatalf("state: exit %d, no row %q\n%s", code, row, out)
		}
	}
	if code, out := s.cli(bin, "retry", id, "--node", "f1/x"); code != 1 || !strings.Contains(out, "f1/x: it did not fail (succeeded)") {
		t.Fatalf("retry --node of a node that succeeded since: exit %d\n%s", code, out)
	}
	if got := markers(t, h); got["f1/x"] != 2 || got["f2/y"] != 1 {
		t.Fatalf("a refused retry ran something: %v", got)
	}
}
