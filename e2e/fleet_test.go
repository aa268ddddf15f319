package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// fleetYAML is a group of the fleet's hosts with a var each, a formula
// fanned out over it (rollout as given) and one after it.
func fleetYAML(s *stack, rollout, gate string, fail string) string {
	var b strings.Builder
	b.WriteString("name: fleet\nvars: {fail: none}\nhosts:\n")
	for i, h := range s.fleet.Hosts {
		fmt.Fprintf(&b, "  h%d: {address: %q, user: %s, labels: {role: web}, vars: {port: %d, dir: %q}}\n", i+1, h.Addr, s.fleet.User, 8081+i, h.Dir)
	}
	b.WriteString("groups:\n  web: {labels: {role: web}}\nformulas:\n  - id: app\n    group: web\n")
	if rollout != "" {
		b.WriteString("    rollout: " + rollout + "\n")
	}
	b.WriteString(`    nodes:
      - name: conf
        run: 'echo "port={{ .Vars.port }} host={{ .Host }}" > {{ .Vars.dir }}/app.conf; date +%s.%N > {{ .Vars.dir }}/started; test {{ .Host }} != ` + fail + `'
`)
	if gate != "" {
		b.WriteString("    health_gate: " + gate + "\n")
	}
	b.WriteString("  - id: lb\n    server: h1\n    depends_on: [app]\n    nodes: [{name: reload, run: 'true'}]\n")
	return b.String()
}

// A group of three hosts with their own vars: each host gets its own
// rendered command, and the plan shows the commands as they run.
func TestFleetGroupAndTemplates(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 3})
	bin := buildGantry(t)
	file := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(file, []byte(fleetYAML(s, "", "", "nobody")), 0o644); err != nil {
		t.Fatal(err)
	}
	planOut, err := exec.Command(bin, "plan", file).CombinedOutput()
	code, plan := 0, string(planOut)
	if err != nil {
		code = -1
	}
	for i, h := range s.fleet.Hosts {
		want := fmt.Sprintf("app-h%d on h%d", i+1, i+1)
		cmd := fmt.Sprintf(`echo "port=%d host=h%d" > %s/app.conf`, 8081+i, i+1, h.Dir)
		if code != 0 || !strings.Contains(plan, want) || !strings.Contains(plan, cmd) {
			t.Fatalf("plan (exit %d) lacks %q or %q:\n%s", code, want, cmd, plan)
		}
	}
	code, out := s.cli(bin, "submit", file, "--watch")
	if code != 0 {
		t.Fatalf("submit --watch: exit %d\n%s", code, out)
	}
	for i, h := range s.fleet.Hosts {
		b, err := os.ReadFile(filepath.Join(h.Dir, "app.conf"))
		if want := fmt.Sprintf("port=%d host=h%d\n", 8081+i, i+1); err != nil || string(b) != want {
			t.Errorf("h%d app.conf = %q (%v), want %q", i+1, b, err, want)
		}
	}
}

// rollout {batch: 1, max_failed: 0} where the second host fails: the
// first ran, the second failed, the third never ran; the workflow fails
// saying why, and each batch's start and end is an event.
func TestFleetRolloutStopsAtMaxFailed(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 3})
	bin := buildGantry(t)
	file := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(file, []byte(fleetYAML(s, "{batch: 1, max_failed: 0}", "", "h2")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := s.cli(bin, "submit", file, "--watch")
	t.Logf("gantry submit --watch:\n%s", out)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	ran := func(i int) bool { return fileExists(filepath.Join(s.fleet.Hosts[i].Dir, "started")) }
	if !ran(0) || !ran(1) || ran(2) {
		t.Errorf("ran: h1 %v h2 %v h3 %v; want h1 and h2 only", ran(0), ran(1), ran(2))
	}
	reason := "rollout of app stopped after batch 2 of 3: 1 instance(s) failed (app-h2), max_failed 0"
	for _, want := range []string{
		"app                          rollout batch 1/3 started: app-h1",
		"app                          rollout batch 1/3 finished (0 failed so far, max_failed 0)",
		"app                          rollout batch 2/3 started: app-h2",
		"rollout stopped: " + reason,
		"app-h3                       blocked (blocked by app-h2): " + reason,
		"workflow fleet FAILED: " + reason,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("watch output lacks %q", want)
		}
	}
	id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]
	doc := s.wait(id, 10*time.Second)
	if f := doc.Formulas["app-h3"]; f == nil || f.Status != dag.FormulaBlocked || f.Error != reason {
		t.Errorf("status of app-h3: %+v", f)
	}
}

// rollout {batch: 2} with a gate: the second batch starts only after the
// first batch's gates passed.
func TestFleetRolloutWaitsForGates(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 3})
	c := fleetYAML(s, "{batch: 2}", "{check: 'sleep 0.3; test -s {{ .Vars.dir }}/app.conf', timeout: 10s, retries: 2}", "nobody")
	id := s.submitYAML(c)
	if doc := s.wait(id, 60*time.Second); doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s", doc.Status)
	}
	var gated []time.Time
	var start3 time.Time
	for _, e := range s.events(id) {
		switch {
		case e.typ == events.TypeHealthPassed && (e.formula == "app-h1" || e.formula == "app-h2"):
			gated = append(gated, e.ended)
		case e.formula == "app-h3" && e.node == "conf" && e.status == "running" && start3.IsZero():
			start3 = e.started
		}
	}
	if len(gated) != 2 || start3.IsZero() {
		t.Fatalf("gates passed %v, app-h3 started %v", gated, start3)
	}
	for _, g := range gated {
		if !start3.After(g) {
			t.Errorf("app-h3 started at %s, before a gate of the first batch passed at %s", start3, g)
		}
	}
}

// submitYAML submits a composition document as written.
func (s *stack) submitYAML(doc string) string {
	s.t.Helper()
	r, code := s.submit([]byte(doc))
	if code != "" || r.Status != "accepted" {
		s.t.Fatalf("submit rejected (%s): %v", code, r.Errors)
	}
	return r.WorkflowID
}
