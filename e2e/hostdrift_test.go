package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// The host drift document gantry drift -o json prints (the e2e tests read
// it as a user's script would).
type driftItem struct {
	Host    string `json:"host"`
	Formula string `json:"formula"`
	Node    string `json:"node"`
	Drift   string `json:"drift"`
	Reason  string `json:"reason"`
	Records string `json:"records"`
}

type driftReport struct {
	Workflow        string         `json:"workflow"`
	CheckWorkflowID string         `json:"check_workflow_id"`
	Counts          map[string]int `json:"counts"`
	Items           []driftItem    `json:"items"`
}

// hostDriftComp: on h0, conf/file writes app.conf and checks its content,
// conf/other makes a file and checks it is there; on h1, tools/nocheck
// has no check (nothing can tell its state on the host).
func hostDriftComp(f *sshtest.Fleet) *dag.Composition {
	h0, h1 := f.Hosts[0], f.Hosts[1]
	file := marked(h0, "conf", "file")
	file.Run = "echo v1 > " + h0.Dir + "/app.conf && " + file.Run
	file.Check = "grep -qx v1 " + h0.Dir + "/app.conf"
	other := marked(h0, "conf", "other")
	other.Run = "touch " + h0.Dir + "/other && " + other.Run
	other.Check = "test -e " + h0.Dir + "/other"
	return &dag.Composition{Name: "hostdrift",
		Hosts: map[string]dag.Host{"h0": {Address: h0.Addr, User: f.User}, "h1": {Address: h1.Addr, User: f.User}},
		Formulas: []dag.Formula{
			{ID: "conf", Server: "h0", Nodes: []dag.Node{file, other},
				HealthGate: &dag.HealthGate{Check: "test -e " + h0.Dir + "/other", Timeout: dag.Duration(5 * time.Second), Retries: 2}},
			{ID: "tools", Server: "h1", DependsOn: []dag.FormulaDep{{Formula: "conf", Condition: dag.ConditionHealthy}},
				Nodes: []dag.Node{marked(h1, "tools", "nocheck")}},
		}}
}

// hostDrift runs gantry drift -o json as the operator and decodes its
// report by "formula/node".
func (s *stack) hostDrift(bin, file string, args ...string) (int, map[string]driftItem, string) {
	s.t.Helper()
	code, out := s.cliSplit(bin, append([]string{"drift", file, "-o", "json", "--progress", "--timeout", "90s"}, args...)...)
	var rep driftReport
	if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
		s.t.Fatalf("drift -o json: exit %d, %v\n%s%s", code, err, out.stdout, out.stderr)
	}
	items := map[string]driftItem{}
	for _, it := range rep.Items {
		items[it.Formula+"/"+it.Node] = it
	}
	return code, items, out.stderr
}

type split struct{ stdout, stderr string }

// cliSplit is cli with stdout and stderr apart.
func (s *stack) cliSplit(bin string, args ...string) (int, split) {
	s.t.Helper()
	cmd := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, isExit := err.(*exec.ExitError); isExit {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatal(err)
	}
	return code, split{o.String(), e.String()}
}

func wantDrift(t *testing.T, items map[string]driftItem, want map[string]string) {
	t.Helper()
	for k, st := range want {
		if items[k].Drift != st {
			t.Errorf("%s: %q (%s), want %q; all: %+v", k, items[k].Drift, items[k].Reason, st, items)
		}
	}
}

// gantry drift asks the hosts: after a hand edit on the host that the
// records cannot see, drift says changed (exit 4) where drift --records
// still says ok; reconcile runs only the changed node (named in rerun,
// since the records have it in place); drift is ok again after. A node
// with neither check nor files is unknown, never ok. A viewer may not ask
// the hosts (it runs commands there), but may compare the records.
func TestHostDriftAfterAHandEdit(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 2})
	bin := buildGantry(t)
	h0, h1 := s.fleet.Hosts[0], s.fleet.Hosts[1]
	file := writeJSON(t, filepath.Join(t.TempDir(), "c.json"), hostDriftComp(s.fleet))
	if code, out := s.cli(bin, "submit", file, "--watch"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	code, items, stderr := s.hostDrift(bin, file)
	if code != 0 || !strings.Contains(stderr, "drift: 2/2 hosts") {
		t.Fatalf("drift right after the run: exit %d, want 0 and progress\n%s", code, stderr)
	}
	wantDrift(t, items, map[string]string{"conf/file": "ok", "conf/other": "ok", "tools/nocheck": "unknown"})
	if it := items["tools/nocheck"]; !strings.Contains(it.Reason, "no check and no files") || it.Records != events.DriftOK {
		t.Errorf("tools/nocheck: %+v", it)
	}

	// By hand, on the host: the records cannot know.
	if err := os.WriteFile(h0.Dir+"/app.conf", []byte("hacked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := s.cli(bin, "drift", file, "--records"); code != 0 || !strings.Contains(out, "hostdrift: 3 ok, 0 changed, 0 missing, 0 orphaned") {
		t.Fatalf("drift --records (the records only): exit %d\n%s", code, out)
	}
	code, items, stderr = s.hostDrift(bin, file)
	if code != 4 {
		t.Fatalf("drift after the hand edit: exit %d, want 4\n%s", code, stderr)
	}
	wantDrift(t, items, map[string]string{"conf/file": "changed", "conf/other": "ok", "tools/nocheck": "unknown"})
	if it := items["conf/file"]; it.Reason != "its check exited 1" || it.Records != events.DriftOK {
		t.Errorf("conf/file: %+v", it)
	}
	code, out := s.cli(bin, "drift", file)
	for _, want := range []string{"conf     file     changed  ok       its check exited 1", "hostdrift on its hosts: 1 ok, 1 changed, 0 missing, 0 unreachable, 1 unknown, 0 orphaned"} {
		if code != 4 || !strings.Contains(out, want) {
			t.Fatalf("drift (table): exit %d, no %q\n%s", code, want, out)
		}
	}

	// A viewer may not ask the hosts, and nothing runs; --records it may.
	before0, before1 := markers(t, h0), markers(t, h1)
	viewer := func(args ...string) (int, string) {
		out, err := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Viewer))...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return code, string(out)
	}
	if code, out := viewer("drift", file, "--timeout", "20s"); code != 3 || !strings.Contains(out, "only an operator may do") {
		t.Fatalf("drift as a viewer: exit %d, want 3 and a refusal\n%s", code, out)
	}
	if code, out := viewer("reconcile", file, "--dry-run", "--drift-timeout", "20s"); code != 3 || !strings.Contains(out, "only an operator may do") {
		t.Fatalf("reconcile --dry-run as a viewer: exit %d, want 3 and a refusal\n%s", code, out)
	}
	if code, out := viewer("drift", file, "--records"); code != 0 || !strings.Contains(out, "3 ok") {
		t.Fatalf("drift --records as a viewer: exit %d\n%s", code, out)
	}

	// reconcile runs conf/file alone: conf/other is ok, tools/nocheck
	// unknown but in place by the records.
	code, out = s.cli(bin, "reconcile", file, "--dry-run", "--drift-timeout", "90s")
	for _, want := range []string{"drift of hostdrift on its hosts: 1 ok, 1 changed", "would run: conf/file (changed on h0)", "dry run: nothing was submitted"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("reconcile --dry-run: exit %d, no %q\n%s", code, want, out)
		}
	}
	if a, b := markers(t, h0), markers(t, h1); fmt.Sprint(a) != fmt.Sprint(before0) || fmt.Sprint(b) != fmt.Sprint(before1) {
		t.Fatalf("a viewer's refused drift or a dry run ran something: %v %v", a, b)
	}
	code, out = s.cli(bin, "reconcile", file, "--watch", "--drift-timeout", "90s")
	if code != 0 || !strings.Contains(out, "reconciling with targets conf") || !strings.Contains(out, "workflow hostdrift SUCCEEDED") {
		t.Fatalf("reconcile --watch: exit %d\n%s", code, out)
	}
	if got, want := markers(t, h0), map[string]int{"conf/file": 2, "conf/other": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("h0 ran %v, want %v", got, want)
	}
	if got, want := markers(t, h1), map[string]int{"tools/nocheck": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("h1 ran %v, want %v", got, want)
	}
	code, items, stderr = s.hostDrift(bin, file)
	if code != 0 {
		t.Fatalf("drift after reconcile: exit %d\n%s", code, stderr)
	}
	wantDrift(t, items, map[string]string{"conf/file": "ok", "conf/other": "ok", "tools/nocheck": "unknown"})
	if code, out := s.cli(bin, "reconcile", file, "--drift-timeout", "90s"); code != 0 || !strings.Contains(out, "nothing to reconcile") {
		t.Fatalf("reconcile after reconciling: exit %d\n%s", code, out)
	}
}

// A host whose port is closed is unreachable, within the timeout, and
// never ok; so is a host that does not answer within --timeout. Drift
// exits 1 (nothing found changed, but hosts could not be asked).
func TestHostDriftUnreachable(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	bin := buildGantry(t)
	h := s.fleet.Hosts[0]
	c := &dag.Composition{Name: "gone",
		Hosts: map[string]dag.Host{"gone": {Address: fmt.Sprintf("127.0.0.1:%d", closedPort(t)), User: s.fleet.User}, "slow": {Address: h.Addr, User: s.fleet.User}},
		Formulas: []dag.Formula{
			{ID: "f", Server: "gone", Nodes: []dag.Node{{Name: "a", Run: "true", Check: "true"}, {Name: "b", Run: "true", Check: "true"}}},
			{ID: "s", Server: "slow", Nodes: []dag.Node{{Name: "hang", Run: "true", Check: "sleep 600"}}},
		}}
	file := writeJSON(t, filepath.Join(t.TempDir(), "gone.json"), c)
	start := time.Now()
	code, out := s.cliSplit(bin, "drift", file, "-o", "json", "--timeout", "20s")
	took := time.Since(start)
	var rep driftReport
	if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
		t.Fatalf("drift: exit %d: %v\n%s%s", code, err, out.stdout, out.stderr)
	}
	if code != 1 || rep.Counts["unreachable"] != 3 || rep.Counts["ok"] != 0 {
		t.Fatalf("drift: exit %d, want 1 and 3 unreachable: %+v\n%s", code, rep, out.stderr)
	}
	for _, it := range rep.Items {
		want := "connection refused"
		if it.Host == "slow" {
			want = "no answer within 20s (--timeout)"
		}
		if !strings.Contains(it.Reason, want) {
			t.Errorf("%s %s/%s: reason %q, want %q", it.Host, it.Formula, it.Node, it.Reason, want)
		}
	}
	if took > 20*time.Second+hostDriftSlack {
		t.Errorf("drift took %s, past its timeout of 20s", took)
	}
	// The check run was cancelled: nothing of it stays on the host.
	if d := s.wait(rep.CheckWorkflowID, 60*time.Second); d.Status == dag.WorkflowSucceeded {
		t.Errorf("the check run %s", d.Status)
	}
}

// hostDriftSlack is what the CLI may take past its timeout: the records'
// reply, the cancel request, the process start, on a loaded machine.
const hostDriftSlack = 15 * time.Second

// closedPort is a loopback port nothing listens on: a connection to it is
// refused.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
