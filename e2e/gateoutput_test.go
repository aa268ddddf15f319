package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A health gate that fails on a real sshd host: what its check printed on
// stderr reaches the terminal in gantry watch (each check's exit status
// and last line, the verdict's), gantry status (the formula's row and its
// last check's lines) and gantry logs (FORMULA/gate, and among every
// node's lines), and the workflow's error says the gate failed and why.
func TestFailingGateOutputReachesTheCLI(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	bin := buildGantry(t)
	h := s.fleet.Hosts[0]
	file := filepath.Join(t.TempDir(), "db.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`name: gated
hosts: {db-1: {address: %q, user: %s}}
formulas:
  - id: db
    server: db-1
    nodes: [{name: install, run: 'echo installed'}]
    health_gate: {check: 'echo starting; echo "pg_isready: no response" >&2; exit 2', timeout: 3s, retries: 3}
  - id: app
    server: db-1
    depends_on: [{formula: db, condition: healthy}]
    nodes: [{name: run, run: 'true'}]
`, h.Addr, s.fleet.User)), 0o644)
	run := func(args ...string) (int, string) {
		out, err := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return code, string(out)
	}
	const why = "health gate failed after 3 checks: pg_isready: no response"
	code, out := run("submit", file, "--watch")
	for _, want := range []string{
		"health check fail (1/3): exit 2\n      | starting\n      | pg_isready: no response\n",
		"health gate fail (3/3): exit 2: " + why + "\n",
		"FAILED: formula db: " + why + "\n",
		"-- 2/2 nodes done, 0 running, 1 failed, 1 blocked\n",
		"-- failed: db (" + why + ")\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("watch does not say %q:\n%s", want, out)
		}
	}
	if code != 1 {
		t.Errorf("watch exit %d, want 1", code)
	}
	id := ""
	for _, r := range s.list() {
		id = r.WorkflowID
	}
	doc := s.wait(id, 30*time.Second)
	if doc.Status != dag.WorkflowFailed || doc.Error != "formula db: "+why {
		t.Fatalf("workflow %s: %q", doc.Status, doc.Error)
	}
	s.waitFor("the projection to have the gate's verdict", 15*time.Second, func() bool {
		f := s.status(id).Formulas["db"]
		return f != nil && f.Health != nil && f.Health.Final
	})
	_, out = run("status", id)
	for _, want := range []string{why + " (exit 2)", "health gate of db on db-1, check 3 (exit 2):\n    starting\n    pg_isready: no response\n",
		"failed: db (" + why + ")", "2/2 nodes done, 0 running, 1 failed, 1 blocked"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not say %q:\n%s", want, out)
		}
	}
	_, out = run("logs", id, "db/gate")
	for _, want := range []string{"db/gate#2", "db/gate#3", "output pg_isready: no response\n", "result fail: exit 2; " + why + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs db/gate does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "installed") {
		t.Errorf("logs db/gate prints a node's lines:\n%s", out)
	}
	_, out = run("logs", id)
	t.Logf("gantry logs:\n%s", out)
	if i, j := strings.Index(out, "installed"), strings.Index(out, "pg_isready: no response"); i < 0 || j < i {
		t.Errorf("logs of every node: want the node's line, then the gate's:\n%s", out)
	}
}

// list is state.list now.
func (s *stack) list() []events.WorkflowSummary {
	s.t.Helper()
	rows, err := s.cl.WithTimeout(5*time.Second).List(context.Background(), 0)
	if !answered(err) {
		s.t.Fatal(err)
	}
	return rows
}

// A cancel while a health gate is being checked stops the check on its
// host (it ran on until the gate's timeout, 60 s here) and gives the gate
// no verdict: the cancelled formula does not say its gate failed.
func TestCancelStopsAGateBeingChecked(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	dir := t.TempDir()
	sleep := fmt.Sprintf("1000.%06d", time.Now().UnixNano()%1000000)
	c, err := composition.Load("gate.yaml", []byte(fmt.Sprintf(`name: gatecancel
hosts: {h: {address: %q, user: %s}}
formulas:
  - id: db
    server: h
    nodes: [{name: install, run: 'true'}]
    health_gate: {check: 'touch %s/checking; sleep %s', timeout: 60s, retries: 1}
`, h.Addr, s.fleet.User, dir, sleep)))
	if err != nil {
		t.Fatal(err)
	}
	id := s.mustSubmit(c)
	s.waitFor("the gate's check to run", 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "checking"))
		return err == nil
	})
	checking := func() string {
		out, _ := exec.Command("pgrep", "-f", "sleep "+strings.ReplaceAll(sleep, ".", "[.]")).Output()
		return strings.TrimSpace(string(out))
	}
	if checking() == "" {
		t.Fatal("pgrep finds no check on the host: the check below could not fail")
	}
	if msg, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel: %s %s", code, msg)
	}
	s.waitFor("the check to stop on the host", 15*time.Second, func() bool { return checking() == "" })
	doc := s.wait(id, 30*time.Second)
	if doc.Status != dag.WorkflowCancelled {
		t.Errorf("workflow %s", doc.Status)
	}
	time.Sleep(time.Second) // a verdict would come right after the check ended
	if f := s.status(id).Formulas["db"]; f == nil || strings.Contains(f.Error, "health gate failed") {
		t.Errorf("the cancelled formula: %+v", f)
	}
}
