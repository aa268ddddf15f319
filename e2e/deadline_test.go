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

// A composition's timeout, over a real sshd: past it, the node running
// on the host is killed there, what has not started is cancelled, and
// the workflow is failed with the reason deadline, within 7 s of the
// submit for a timeout of 5 s.
func TestCompositionDeadlineKillsOnTheHost(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	sleep := uniqueSleep(60)
	comp := fmt.Sprintf(`
name: deadline
timeout: 5s
hosts:
  h: {address: %q, user: %q}
formulas:
  - id: slow
    server: h
    nodes: [{name: wait, run: %q, env: {GANTRY_ATTEMPTS: %q}}]
  - id: after
    server: h
    depends_on: [slow]
    nodes: [{name: never, run: "touch %s/never"}]
`, h.Addr, s.fleet.User, sleep, filepath.Join(h.Dir, "attempts"), h.Dir)
	tl := newTimeline()
	remote := watchRemote(t, tl, sleep)
	id := s.submitYAML(comp)
	tl.at("submitted " + id)
	s.watchStatus(tl, id)
	defer func() { t.Logf("timeline:\n%s", tl) }()
	s.waitFor("the sleep to run on the host", 5*time.Second, remote.running)
	var doc *events.WorkflowDoc
	s.waitFor("the workflow to end", 10*time.Second, func() bool {
		doc = s.status(id)
		return doc.Status.Terminal()
	})
	took := tl.at("gantry status: " + string(doc.Status) + ": " + doc.Error)
	const want = "deadline: the composition's timeout of 5s passed with 2 formula(s) unfinished (slow, after)"
	if doc.Status != dag.WorkflowFailed || doc.Error != want {
		t.Fatalf("workflow %s %q, want failed %q", doc.Status, doc.Error, want)
	}
	if took > 7*time.Second {
		t.Fatalf("failed %.1fs after the submit, want within 7s", took.Seconds())
	}
	if took < 5*time.Second {
		t.Fatalf("failed %.1fs after the submit, before its timeout of 5s", took.Seconds())
	}
	// FAILED comes once the host's command is gone.
	if remote.stillThere() {
		t.Fatalf("the sleep still runs on the host once the workflow is failed")
	}
	// It says why: no one asked (it said "cancelled by request").
	if n := doc.Formulas["slow"].Nodes["wait"]; n.Status != dag.NodeCancelled || !strings.HasPrefix(n.Reason, "cancelled: the composition's timeout passed") {
		t.Errorf("the running node is %s (%q), want cancelled: the composition's timeout passed", n.Status, n.Reason)
	}
	if f := doc.Formulas["after"]; f.Status != dag.FormulaCancelled || f.Nodes["never"].Status != dag.NodeCancelled ||
		f.Nodes["never"].Error != "" && !strings.Contains(f.Nodes["never"].Error, "timeout") {
		t.Errorf("after = %+v", f)
	}
	evs := s.events(id)
	stopping, failed := -1, -1
	for i, e := range evs {
		if e.typ.Family() == events.FamilyWorkflow && e.status == "running" && strings.HasPrefix(e.reason, "deadline: ") {
			stopping = i
			tl.at("event: workflow running: " + e.reason)
		}
		if e.typ == events.WorkflowType(dag.WorkflowFailed) {
			failed = i
		}
	}
	killed := index(evs, events.FamilyNode, "slow", "wait", "cancelled")
	for _, i := range []int{killed, failed} {
		if i >= 0 {
			t.Logf("event %s %s/%s %s at +%.2fs", evs[i].typ, evs[i].formula, evs[i].node, evs[i].reason, evs[i].ended.Sub(tl.t0).Seconds())
		}
	}
	if stopping < 0 || killed < stopping || failed < killed {
		t.Fatalf("events out of order: stopping %d, node killed %d, workflow failed %d: %v", stopping, killed, failed, evs)
	}
	if _, status := s.hostAttemptOf(h.Dir, id, "slow", "wait"); status != "143" && status != "137" {
		t.Errorf("the host's record of the attempt says %q, want it killed (143 or 137)", status)
	}
}

// A formula's timeout counts from its dispatch: past it, that formula's
// node is killed on the host and the formula is failed with the reason
// deadline; its dependent is blocked, an independent formula goes on
// (on_failure continue), and the workflow fails naming the deadline.
func TestFormulaDeadlineKillsOnTheHost(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	sleep := uniqueSleep(60)
	comp := fmt.Sprintf(`
name: fdeadline
on_failure: continue
hosts:
  h: {address: %q, user: %q}
formulas:
  - id: first
    server: h
    nodes: [{name: pause, run: sleep 2}]
  - id: slow
    server: h
    timeout: 3s
    depends_on: [first]
    nodes:
      - {name: wait, run: %q, env: {GANTRY_ATTEMPTS: %q}}
      - {name: next, run: "touch %s/next"}
  - id: after
    server: h
    depends_on: [slow]
    nodes: [{name: never, run: "touch %s/never"}]
  - id: other
    server: h
    depends_on: [first]
    nodes: [{name: quick, run: sleep 4}]
`, h.Addr, s.fleet.User, sleep, filepath.Join(h.Dir, "attempts"), h.Dir, h.Dir)
	tl := newTimeline()
	remote := watchRemote(t, tl, sleep)
	id := s.submitYAML(comp)
	tl.at("submitted " + id)
	s.watchStatus(tl, id)
	defer func() { t.Logf("timeline:\n%s", tl) }()
	s.waitFor("the sleep to run on the host", 8*time.Second, remote.running)
	var doc *events.WorkflowDoc
	s.waitFor("slow to fail", 12*time.Second, func() bool {
		doc = s.status(id)
		f := doc.Formulas["slow"]
		return f != nil && f.Status != dag.FormulaReady && f.Status != dag.FormulaRunning && f.Status != dag.FormulaPending
	})
	took := tl.at("gantry status: slow " + string(doc.Formulas["slow"].Status) + ": " + doc.Formulas["slow"].Error)
	if f := doc.Formulas["slow"]; f.Status != dag.FormulaFailed || f.Error != "deadline: formula slow's timeout of 3s passed with 2 node(s) unfinished (wait, next)" {
		t.Fatalf("slow %s %q", f.Status, f.Error)
	}
	// Dispatched after first's 2 s: failed 3 s after that, not 3 s after the submit.
	if took < 4800*time.Millisecond || took > 7500*time.Millisecond {
		t.Fatalf("slow failed %.1fs after the submit, want 3s after its dispatch (about 5s)", took.Seconds())
	}
	if remote.stillThere() {
		t.Fatalf("the sleep still runs on the host once its formula is failed")
	}
	doc = s.wait(id, 15*time.Second)
	tl.at("gantry status: " + string(doc.Status) + ": " + doc.Error)
	if doc.Status != dag.WorkflowFailed || doc.Error != "formula slow failed: deadline: its timeout of 3s passed" {
		t.Fatalf("workflow %s %q", doc.Status, doc.Error)
	}
	if f := doc.Formulas["other"]; f.Status != dag.FormulaSucceeded {
		t.Errorf("the independent formula is %s, want succeeded (on_failure continue)", f.Status)
	}
	if f := doc.Formulas["after"]; f.Status != dag.FormulaBlocked || f.Blocker != "slow" {
		t.Errorf("after = %s (blocker %q), want blocked by slow", f.Status, f.Blocker)
	}
	if n := doc.Formulas["slow"].Nodes; n["wait"].Status != dag.NodeCancelled || n["next"].Status == dag.NodeSucceeded {
		t.Errorf("slow's nodes: wait %s, next %s", n["wait"].Status, n["next"].Status)
	}
	if _, status := s.hostAttemptOf(h.Dir, id, "slow", "wait"); status != "143" && status != "137" {
		t.Errorf("the host's record of the attempt says %q, want it killed (143 or 137)", status)
	}
	for _, e := range s.events(id) {
		if e.typ.Family() == events.FamilyWorkflow && strings.HasPrefix(e.reason, "deadline: formula slow") {
			return
		}
	}
	t.Errorf("no workflow event said slow was being stopped for its deadline")
}

// Work nobody can take: a host in a zone no executor serves. Its
// dispatch is reported unclaimed, naming the zone, as an event and in
// gantry status, within --unclaimed-after (1 s here, and a second to
// look); a cancel ends the workflow at once, not after the cancel wait.
func TestUnclaimedWorkIsReportedAndCancelledAtOnce(t *testing.T) {
	s := newStack(t, stackOptions{unclaimedAfter: time.Second})
	tl := newTimeline()
	id := s.submitYAML(`
name: nowhere
hosts:
  far: {transport: local, labels: {zone: nowhere}}
formulas:
  - {id: lost, server: far, nodes: [{name: n, run: "true"}]}
`)
	tl.at("submitted " + id)
	defer func() { t.Logf("timeline:\n%s", tl) }()
	const why = "no executor serves zone nowhere (start one with --labels zone=nowhere) (its dispatch is unclaimed after 1s)"
	var doc *events.WorkflowDoc
	s.waitFor("gantry status to say the work is unclaimed", 5*time.Second, func() bool {
		doc = s.status(id)
		f := doc.Formulas["lost"]
		return f != nil && f.Error != ""
	})
	took := tl.at("gantry status: lost " + string(doc.Formulas["lost"].Status) + ": " + doc.Formulas["lost"].Error)
	if f := doc.Formulas["lost"]; f.Status != dag.FormulaReady || f.Error != why {
		t.Fatalf("lost %s %q, want ready %q", f.Status, f.Error, why)
	}
	if took < time.Second || took > 2500*time.Millisecond {
		t.Fatalf("reported %.1fs after the submit, want after 1s and within 2.5s", took.Seconds())
	}
	found := false
	for _, e := range s.events(id) {
		if e.typ == events.FormulaType(dag.FormulaReady) && e.formula == "lost" && e.err == why {
			found = true
		}
	}
	if !found {
		t.Fatal("no formula event says the work is unclaimed")
	}
	tl.at("cancel")
	body, code := s.control(id, events.VerbCancel)
	if code != "" || !strings.Contains(body, `"status":"cancelled"`) {
		t.Fatalf("cancel: %s %s, want the workflow cancelled in the reply", code, body)
	}
	s.waitFor("gantry status to say cancelled", 2*time.Second, func() bool {
		doc = s.status(id)
		return doc.Status == dag.WorkflowCancelled
	})
	tl.at("gantry status: " + string(doc.Status))
	if f := doc.Formulas["lost"]; f.Status != dag.FormulaCancelled || f.Nodes["n"].Status != dag.NodeCancelled {
		t.Fatalf("lost = %+v", f)
	}
}

// hostAttemptOf reads the host's record (under dir/attempts) of
// the first attempt of a node in generation 1: its supervisor's pid and
// its exit status ("" while it runs).
func (s *stack) hostAttemptOf(dir, id, formula, node string) (pid, status string) {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "attempts", fmt.Sprintf("%s.1.create.%s.%s.1.run.run", id, formula, node)))
	if err != nil {
		return "", ""
	}
	l := strings.Split(string(b), "\n")
	if len(l) > 1 {
		status = l[1]
	}
	return l[0], status
}

// stillThere says, now (read with pgrep), whether the command runs.
func (r *remote) stillThere() bool {
	out, _ := exec.Command("pgrep", "-f", r.pattern).Output()
	return strings.TrimSpace(string(out)) != ""
}

// The composition's timeout passes while NATS is down, after its one node
// ended on the host in time: the outcome could not be stored, so the
// planner's deadline stops the run; the executor then says the node had
// ended before the stop reached it. The run ends succeeded, as its
// work did. Before, it ended failed, "1 formula(s) unfinished (f)", after
// its stream said f succeeded.
func TestADeadlinePassedInANATSOutageAfterTheWorkEnded(t *testing.T) {
	s := newStack(t, stackOptions{})
	mark := filepath.Join(t.TempDir(), "mark")
	c := &dag.Composition{Name: fmt.Sprintf("deadline-outage-%d", time.Now().UnixNano()%1e9), Timeout: dag.Duration(10 * time.Second),
		Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "f", Server: "me", Nodes: []dag.Node{
			{Name: "a", Run: fmt.Sprintf("echo start >> %[1]s; sleep 3; echo end >> %[1]s", mark)}}}}}
	id := s.mustSubmit(c)
	s.waitFor("a to start", 30*time.Second, func() bool { b, _ := os.ReadFile(mark); return strings.Contains(string(b), "start") })
	s.ns.Stop()
	time.Sleep(14 * time.Second) // the node ends at 3 s, the deadline passes at 10 s
	s.ns.StartAgain()
	d := s.wait(id, 60*time.Second)
	if b, _ := os.ReadFile(mark); string(b) != "start\nend\n" {
		t.Fatalf("the node did not run to its end once: %q", b)
	}
	if d.Status != dag.WorkflowSucceeded {
		t.Errorf("workflow %s (%s), want succeeded: its only node ended within the timeout", d.Status, d.Error)
	}
	var finals []string
	for _, e := range s.events(id) {
		if e.typ.Family() == events.FamilyWorkflow && dag.WorkflowState(e.status).Terminal() {
			finals = append(finals, e.status)
		}
	}
	if len(finals) != 1 || finals[0] != string(dag.WorkflowSucceeded) {
		t.Errorf("the stream ends the run as %q", finals)
	}
}
