package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// watch and status show a node's files, each with its diff indented
// under it, what the host said escaped.
func TestFilesShownEscaped(t *testing.T) {
	t.Parallel()
	ref := events.Ref{WorkflowID: "w1", Workflow: "w", Formula: "web", Host: "h1", Node: "conf", Operation: dag.OpCheck, Generation: 1}
	files := []events.FileResult{
		{Path: "/etc/app.conf", Status: events.FileChanged, Differs: []string{"content"}, SHA256: strings.Repeat("ab", 32),
			Diff: "--- a/etc/app.conf\n+++ b/etc/app.conf\n@@ -1 +1 @@\n-port=" + hostile + "\n+port=8080\n"},
		{Path: "/etc/tls.key", Status: events.FileUnchanged},
	}
	var b strings.Builder
	printEvent(&b, envOf(t, &events.NodeEvent{Ref: ref, Status: dag.NodeSucceeded, Check: events.CheckWouldChange, Files: files}))
	out := b.String()
	assertTermSafe(t, "watch", out, true)
	for _, want := range []string{"      /etc/app.conf changed (content) sha256:abababababab\n", "        @@ -1 +1 @@\n", "        +port=8080\n", "      /etc/tls.key unchanged\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("watch does not show %q:\n%s", want, out)
		}
	}
	doc := &events.WorkflowDoc{WorkflowID: "w1", Workflow: "w", Operation: dag.OpCheck, Status: dag.WorkflowSucceeded,
		Formulas: map[string]*events.FormulaDoc{"web": {Host: "h1", Status: dag.FormulaSucceeded, Nodes: map[string]*events.NodeDoc{
			"conf": {Status: dag.NodeSucceeded, Check: events.CheckWouldChange, Files: files}}}}}
	b.Reset()
	if err := statusTable(&b, doc); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	assertTermSafe(t, "status", out, true)
	if !strings.Contains(out, "FILES\n  web/conf on h1\n    /etc/app.conf changed (content)") || !strings.Contains(out, "      +port=8080\n") {
		t.Errorf("status does not list the files:\n%s", out)
	}
}

// --diff needs --check (usage, exit 2); --check makes the document an
// operation: check with diff (checked here before it is sent: a bad one
// is refused without a server).
func TestSubmitCheckFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(f, []byte("name: c\nhosts: {me: {transport: local}}\nformulas:\n  - {id: a, server: me, nodes: [{name: n, files: [{path: rel, content: x}]}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, "submit", "--diff", f); code != ExitUsage || !strings.Contains(errOut, "--diff shows what --check would change") {
		t.Errorf("--diff alone: exit %d %s", code, errOut)
	}
	code, _, errOut := run(t, "submit", "--check", "--diff", f, "--server", "nats://127.0.0.1:1")
	if code != ExitFailed || !strings.Contains(errOut, `formulas[0].nodes[0].files[0].path: path "rel" is relative`) {
		t.Errorf("--check of a bad composition: exit %d %s", code, errOut)
	}
	root := &dag.Value{Kind: dag.KindMap, Keys: []string{"name", "operation"}, Vals: []*dag.Value{{Kind: dag.KindString, Scalar: "c"}, {Kind: dag.KindString, Scalar: "create"}}}
	checkEdit(true)(root)
	if op, diff := root.Get("operation"), root.Get("diff"); op.Scalar != "check" || diff == nil || diff.Scalar != "true" || len(root.Keys) != 3 {
		t.Errorf("after the edit: %v %v", root.Keys, root.Vals)
	}
}

// drift reads a check run's file results: changed, missing (a changed
// file that was not there) or ok.
func TestDriftReadsFileResults(t *testing.T) {
	t.Parallel()
	o := outcomeOf(&events.NodeEvent{Status: dag.NodeSucceeded, Check: events.CheckWouldChange, Files: []events.FileResult{
		{Path: "/a", Status: events.FileUnchanged}, {Path: "/b", Status: events.FileChanged, Differs: []string{"content"}, Diff: "-x\n+y\n"},
		{Path: "/c", Status: events.FileChanged, Differs: []string{"missing"}}}})
	got := fmt.Sprint(o.Files)
	if want := "[{/a ok } {/b changed -x\n+y\n} {/c missing }]"; got != want {
		t.Errorf("files %q, want %q", got, want)
	}
}
