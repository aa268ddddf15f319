package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Execute(args, &out, &errb)
	return code, out.String(), errb.String()
}

const examples = "../../../../examples/"

func TestValidate(t *testing.T) {
	code, out, errOut := run(t, "validate", examples+"hello.yaml", examples+"kubernetes.yaml")
	if code != ExitOK || !strings.Contains(out, "kubernetes.yaml: valid: wuji: create 10 formulas, 22 nodes, 5 health gates in 5 levels") {
		t.Fatalf("code %d\n%s\n%s", code, out, errOut)
	}
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("want one line per file, got %d:\n%s", n, out)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte(`name: t
hosts: {h: {transport: local}}
formulas:
  - id: alpha
    server: h
    depends_on: [beta]
    nodes: [{name: a, run: x}]
  - id: beta
    server: h
    depends_on: [alpha]
    nodes: [{name: "b.c"}]
`), 0o644)
	code, out, errOut = run(t, "validate", examples+"hello.yaml", bad)
	if code != ExitFailed {
		t.Fatalf("invalid file: exit %d", code)
	}
	for _, want := range []string{
		bad + `:6: formulas[0].depends_on: dependency cycle between formulas: alpha -> beta -> alpha`,
		bad + `:11: formulas[1].nodes[0].name: name "b.c" contains '.'`,
		bad + `:11: formulas[1].nodes[0].run: run is required for operation create`,
		"1 of 2 file(s) invalid",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(out, "hello.yaml: valid") {
		t.Errorf("valid file not reported: %s", out)
	}
	if code, _, errOut = run(t, "validate", "/nonexistent.yaml"); code != ExitProblem || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing file: %d %s", code, errOut)
	}
	if code, _, _ = run(t, "validate"); code != ExitUsage {
		t.Errorf("no args: exit %d, want %d", code, ExitUsage)
	}
}

func TestPlanFormats(t *testing.T) {
	code, out, _ := run(t, "plan", examples+"kubernetes.yaml")
	if code != 0 || !strings.Contains(out, "level 3\n  worker-0-kubernetes on worker-0\n    after: worker-0-containerd healthy, cp-kubernetes healthy") ||
		!strings.Contains(out, "gate: systemctl is-active containerd (1m0s, 6 retries)") {
		t.Fatalf("text plan:\n%s", out)
	}
	code, out, _ = run(t, "plan", examples+"kubernetes.yaml", "--format", "json")
	var plan struct {
		Workflow string     `json:"workflow"`
		Levels   [][]string `json:"levels"`
		Formulas []struct {
			ID    string   `json:"id"`
			Order []string `json:"order"`
		} `json:"formulas"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil || code != 0 {
		t.Fatalf("json plan: %v\n%s", err, out)
	}
	if plan.Workflow != "wuji" || len(plan.Levels) != 5 || plan.Levels[4][0] != "cni" || plan.Formulas[0].Order[0] != "swapoff" {
		t.Errorf("json plan = %+v", plan)
	}
	code, out, _ = run(t, "plan", examples+"hello.yaml", "-f", "dot")
	if code != 0 || !strings.HasPrefix(out, `digraph "hello" {`) || !strings.Contains(out, `"prepare/greeting" -> "report/uname" [ltail="cluster_prepare", lhead="cluster_report", label="healthy"`) {
		t.Errorf("dot:\n%s", out)
	}
	code, out, _ = run(t, "plan", examples+"hello.yaml", "-f", "mermaid")
	if code != 0 || !strings.HasPrefix(out, "flowchart TD\n") || !strings.Contains(out, "F0 -->|healthy| F1") {
		t.Errorf("mermaid:\n%s", out)
	}
	if code, _, errOut := run(t, "plan", examples+"hello.yaml", "-f", "svg"); code != ExitUsage || !strings.Contains(errOut, `unknown --format "svg"`) {
		t.Errorf("bad format: %d %s", code, errOut)
	}
}

func TestPlanTargets(t *testing.T) {
	src, _ := os.ReadFile(examples + "kubernetes.yaml")
	f := filepath.Join(t.TempDir(), "k.yaml")
	os.WriteFile(f, []byte(strings.Replace(string(src), "on_failure: stop", "on_failure: stop\ntargets: [kubeadm-init]", 1)), 0o644)
	code, out, errOut := run(t, "plan", f)
	if code != 0 {
		t.Fatal(errOut)
	}
	if !strings.Contains(out, "targets: kubeadm-init\nnot selected: worker-0-os, worker-0-containerd, worker-0-kubernetes, worker-1-os, worker-1-containerd, worker-1-kubernetes, cni") ||
		!strings.Contains(out, "cp-kubernetes on cp-0 [target]") {
		t.Errorf("targets plan:\n%s", out)
	}
}

func TestPrintHostNodes(t *testing.T) {
	end := time.Date(2026, 11, 21, 12, 0, 0, 0, time.Local)
	nodes := []events.HostNode{
		{Host: "cp-0", Workflow: "wuji", Formula: "os", Node: "base", Status: dag.NodeBlocked, Operation: dag.OpCreate, SpecHash: "sha256:0123456789abcdef", WorkflowID: "wf-2", Blocker: "net",
			InPlace: &events.InPlace{Status: dag.NodeSucceeded, SpecHash: "sha256:fedcba9876543210", WorkflowID: "wf-1"}},
		{Host: "cp-0", Workflow: "wuji", Formula: "os", Node: "conf", Status: dag.NodeSucceeded, Operation: dag.OpCreate, SpecHash: "sha256:aaaa", WorkflowID: "wf-1", EndedAt: &end,
			InPlace: &events.InPlace{Status: dag.NodeSucceeded, SpecHash: "sha256:aaaa", WorkflowID: "wf-1"},
			Check:   &events.HostCheck{Status: dag.NodeSucceeded, Result: events.CheckOK, WorkflowID: "wf-3"}},
		{Host: "cp-0", Workflow: "other", Formula: "os", Node: "new", Status: dag.NodePending,
			Check: &events.HostCheck{Status: dag.NodeFailed, WorkflowID: "wf-3"}},
	}
	var b bytes.Buffer
	if err := printHostNodes(&b, nodes); err != nil {
		t.Fatal(err)
	}
	want := `HOST  COMPOSITION  FORMULA  NODE  STATUS     OPERATION  SPEC          ENDED                IN_PLACE                CHECK   WORKFLOW_ID
cp-0  wuji         os       base  blocked    create     0123456789ab  -                    yes, spec fedcba987654  -       wf-2
cp-0  wuji         os       conf  succeeded  create     aaaa          2026-11-21 12:00:00  yes                     ok      wf-1
cp-0  other        os       new   pending    -          -             -                    no                      failed  -
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// gantry version and gantry --version print the version, the commit and
// the Go version.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := run(t, args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != ExitOK || errOut != "" || len(lines) != 3 || !strings.HasPrefix(lines[0], "gantry ") || !strings.HasPrefix(lines[1], "commit ") ||
			!strings.HasPrefix(lines[2], runtime.Version()+" ") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

// TestDevFlagsNamedWhenBad: a port out of range or a per-host count below
// 1 is a usage error naming the flag, before anything starts.
func TestDevFlagsNamedWhenBad(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dev", "--port", "99999"}, "--port 99999: a TCP port is 1 to 65535"},
		{[]string{"dev", "--port", "-1"}, "--port -1: a TCP port is 1 to 65535"},
		{[]string{"dev", "--per-host", "-3"}, "--per-host -3: at least 1"},
		{[]string{"dev", "--per-host", "0"}, "--per-host 0: at least 1"},
	} {
		code, _, errOut := run(t, append(tc.args, "--data-dir", t.TempDir())...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("gantry %s: exit %d, %q; want %d and %q", strings.Join(tc.args, " "), code, errOut, ExitUsage, tc.want)
		}
	}
}
