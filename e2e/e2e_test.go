package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
	"github.com/nats-io/nats.go/jetstream"
)

// The kubernetes example, aimed at three real sshd hosts, runs to the end
// in dependency order, each command once on its own host, and the
// projection says so.
func TestKubernetesExampleEndToEnd(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 3})
	c, hosts := k8sOnFleet(t, s.fleet)
	plan, err := dag.NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	id := s.mustSubmit(c)
	doc := s.wait(id, 90*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s: %s", doc.Status, doc.Error)
	}
	evs := s.events(id)

	// Lifecycle order against the DAG.
	if i, j := index(evs, "workflow", "", "", "accepted"), index(evs, "workflow", "", "", "running"); i < 0 || j < i {
		t.Fatalf("workflow accepted/running at %d/%d", i, j)
	}
	if last := evs[len(evs)-1]; last.typ != "gantry.workflow.succeeded" {
		t.Errorf("last event %s, want the workflow's success", last)
	}
	for _, f := range plan.Formulas {
		ready := index(evs, "formula", f.ID, "", "ready")
		if ready < 0 {
			t.Fatalf("%s never dispatched", f.ID)
		}
		for _, d := range f.DependsOn {
			want := "succeeded"
			if d.Condition == dag.ConditionHealthy {
				want = "healthy"
			}
			if k := index(evs, "formula", d.Formula, "", want); k < 0 || k > ready {
				t.Errorf("%s dispatched (event %d) before %s was %s (event %d)", f.ID, ready, d.Formula, want, k)
			}
		}
		if f.Gate != nil {
			if g, h := index(evs, "formula", f.ID, "", "gating"), index(evs, "formula", f.ID, "", "healthy"); g < 0 || h < g {
				t.Errorf("%s gating/healthy at %d/%d", f.ID, g, h)
			}
		}
		for _, n := range f.Nodes {
			run := index(evs, "node", f.ID, n.Name, "running")
			ok := index(evs, "node", f.ID, n.Name, "succeeded")
			if run < ready || ok < run {
				t.Errorf("%s/%s: ready %d running %d succeeded %d", f.ID, n.Name, ready, run, ok)
			}
			for _, dep := range n.DependsOn {
				if k := index(evs, "node", f.ID, dep, "succeeded"); k < 0 || k > run {
					t.Errorf("%s/%s ran before %s succeeded", f.ID, n.Name, dep)
				}
			}
		}
	}

	// Each command ran exactly once, on its own host.
	for name, h := range hosts {
		got := markers(t, h)
		want := map[string]int{}
		for _, f := range plan.Formulas {
			if f.Server == name {
				for _, n := range f.Nodes {
					want[f.ID+"/"+n.Name] = 1
				}
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s markers %v, want %v", name, got, want)
		}
		for k := range want {
			if got[k] != 1 {
				t.Errorf("%s: %s ran %d times, want 1", name, k, got[k])
			}
		}
	}

	// The final projection.
	if len(doc.Formulas) != len(plan.Formulas) {
		t.Fatalf("projection has %d formulas, want %d", len(doc.Formulas), len(plan.Formulas))
	}
	for _, f := range plan.Formulas {
		fd := doc.Formulas[f.ID]
		want := dag.FormulaSucceeded
		if f.Gate != nil {
			want = dag.FormulaHealthy
		}
		if fd == nil || fd.Status != want || fd.Host != f.Server {
			t.Errorf("projection of %s: %+v, want %s on %s", f.ID, fd, want, f.Server)
			continue
		}
		for _, n := range f.Nodes {
			nd := fd.Nodes[n.Name]
			if nd == nil || nd.Status != dag.NodeSucceeded || nd.Attempts != 1 || nd.Transitions != 2 || nd.SpecHash != n.SpecHash || nd.ExitCode == nil || *nd.ExitCode != 0 {
				t.Errorf("projection of %s/%s: %+v", f.ID, n.Name, nd)
			}
		}
	}
	cp, err := s.cl.WithTimeout(5*time.Second).Host(context.Background(), "cp-0")
	if err != nil {
		t.Fatalf("state.host: %v", err)
	}
	if len(cp) != 8 { // cp-os 3, cp-containerd 2, cp-kubernetes 2, cni 1
		t.Errorf("state.host cp-0 has %d nodes, want 8", len(cp))
	}
	for _, hn := range cp {
		if hn.Status != dag.NodeSucceeded || hn.WorkflowID != id || hn.Operation != dag.OpCreate || len(hn.Log) != 2 || !strings.HasPrefix(hn.Actor, "executor/") {
			t.Errorf("host node %+v", hn)
		}
	}
}

// A failing health gate blocks the formulas that wait for it (naming it),
// while independent formulas finish.
func TestFailingGateBlocksDependents(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 3})
	c, hosts := k8sOnFleet(t, s.fleet)
	c.OnFailure = dag.OnFailureContinue
	for i := range c.Formulas {
		if c.Formulas[i].ID == "cp-kubernetes" {
			c.Formulas[i].HealthGate = &dag.HealthGate{Check: "echo apiserver not ready >&2; false", Timeout: dag.Duration(2 * time.Second), Retries: 3}
		}
	}
	id := s.mustSubmit(c)
	doc := s.wait(id, 90*time.Second)
	if doc.Status != dag.WorkflowFailed {
		t.Fatalf("workflow %s, want failed", doc.Status)
	}
	want := map[string]dag.FormulaState{
		"cp-os": dag.FormulaSucceeded, "cp-containerd": dag.FormulaHealthy, "cp-kubernetes": dag.FormulaUnhealthy,
		"worker-0-os": dag.FormulaSucceeded, "worker-0-containerd": dag.FormulaHealthy, "worker-0-kubernetes": dag.FormulaBlocked,
		"worker-1-os": dag.FormulaSucceeded, "worker-1-containerd": dag.FormulaHealthy, "worker-1-kubernetes": dag.FormulaBlocked,
		"cni": dag.FormulaBlocked,
	}
	for id, st := range want {
		f := doc.Formulas[id]
		if f == nil || f.Status != st {
			t.Errorf("%s = %+v, want %s", id, f, st)
			continue
		}
		if st == dag.FormulaBlocked {
			if f.Blocker != "cp-kubernetes" {
				t.Errorf("%s blocked by %q, want cp-kubernetes", id, f.Blocker)
			}
			for name, n := range f.Nodes {
				if n.Status != dag.NodeBlocked || n.Blocker != "cp-kubernetes" {
					t.Errorf("%s/%s = %+v, want blocked by cp-kubernetes", id, name, n)
				}
			}
		}
	}
	// The per-host projection names the workflow that blocked them.
	for name := range doc.Formulas["worker-0-kubernetes"].Nodes {
		s.wantHostDoc("worker-0", c.Name, "worker-0-kubernetes", name, map[string]any{"status": dag.NodeBlocked, "blocker": "cp-kubernetes", "operation": dag.OpCreate, "workflow_id": id})
	}
	if h := doc.Formulas["cp-kubernetes"].Health; h == nil || h.Status != events.HealthFail || !h.Final || h.Attempts < 1 || !strings.Contains(h.Output, "apiserver not ready") {
		t.Errorf("cp-kubernetes health %+v", h)
	}
	// Its 3 checks are spread over its 2 s budget: the verdict comes near
	// the end of it, not before.
	var checks []evt
	for _, e := range s.events(id) {
		if e.typ.Family() == events.FamilyHealth && e.formula == "cp-kubernetes" {
			checks = append(checks, e)
		}
	}
	if len(checks) != 3 || checks[2].status != string(events.HealthFail) {
		t.Errorf("cp-kubernetes health events %v, want 2 attempts and a failing verdict", checks)
	} else if took := checks[2].ended.Sub(checks[0].started); took < 1800*time.Millisecond || took > 2500*time.Millisecond {
		t.Errorf("cp-kubernetes verdict %s after its first check, want from 1.8s to 2s (and a little for a loaded machine)", took)
	}
	for _, w := range []string{"worker-0", "worker-1"} {
		m := markers(t, hosts[w])
		if m[w+"-kubernetes/kubeadm-join"] != 0 || m[w+"-containerd/containerd"] != 1 {
			t.Errorf("%s markers %v: blocked nodes ran or independent ones did not", w, m)
		}
	}
}

// A cycle is rejected with a reply that names it, and nothing is written.
func TestCycleRejected(t *testing.T) {
	s := newStack(t, stackOptions{})
	doc := `{"name":"cyc","hosts":{"h":{"transport":"local"}},"formulas":[
		{"id":"alpha","server":"h","depends_on":["gamma"],"nodes":[{"name":"a","run":"touch /tmp/never"}]},
		{"id":"beta","server":"h","depends_on":["alpha"],"nodes":[{"name":"b","run":"true"}]},
		{"id":"gamma","server":"h","depends_on":["beta"],"nodes":[{"name":"c","run":"true"}]}]}`
	r, code := s.submit([]byte(doc))
	if code != "400" || r.Status != "rejected" || r.WorkflowID != "" {
		t.Fatalf("reply %+v (code %q)", r, code)
	}
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "alpha -> gamma -> beta -> alpha") {
		t.Fatalf("errors %q do not name the cycle", r.Errors)
	}
	// YAML with several problems: all reported at once.
	r, code = s.submit([]byte("name: Bad\nhosts: {}\nformulas:\n  - {id: a, server: nowhere, nodes: [{name: x}]}\n"))
	if code != "400" || len(r.Errors) != 3 {
		t.Fatalf("want 3 problems, got %q", r.Errors)
	}
	kv, err := s.js.KeyValue(t.Context(), events.BucketWorkflows)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeys(t.Context())
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatal(err)
	}
	if err == nil {
		for k := range lister.Keys() {
			t.Errorf("a rejected composition left state behind: %s", k)
		}
	}
}

// A composition over the planner's size limit, sent over the bus, gets
// the planner's answer naming both sizes, not the client's "maximum
// payload exceeded": the servers gantry configures take a request that
// large (eventbus.MaxRequestBytes).
func TestOversizedCompositionGetsThePlannersAnswer(t *testing.T) {
	s := newStack(t, stackOptions{})
	pad := strings.Repeat("x", dag.DefaultMaxBytes+dag.DefaultMaxBytes/2)
	doc := `{"name":"big","hosts":{"h":{"transport":"local"}},"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":"true # ` + pad + `"}]}]}`
	r, code := s.submit([]byte(doc))
	if code != "400" || r.Status != "rejected" || r.WorkflowID != "" {
		t.Fatalf("reply %+v (code %q)", r, code)
	}
	want := fmt.Sprintf("document is %d bytes, over the %d-byte limit", len(doc), dag.DefaultMaxBytes)
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], want) {
		t.Fatalf("errors %q, want one saying %q", r.Errors, want)
	}
}

// A host whose key is not in known_hosts is refused: the node fails with a
// clear error and its command never runs.
func TestUnknownHostKeyRefused(t *testing.T) {
	var only0 string
	s := newStack(t, stackOptions{hosts: 2, knownHosts: func(f *sshtest.Fleet) string {
		b, _ := os.ReadFile(f.KnownHosts)
		only0 = f.Dir + "/known_hosts_host0"
		os.WriteFile(only0, []byte(strings.SplitN(string(b), "\n", 2)[0]+"\n"), 0o600)
		return only0
	}})
	h := s.fleet.Hosts[1]
	c := &dag.Composition{Name: "stranger", Hosts: map[string]dag.Host{"stranger": {Address: h.Addr, User: s.fleet.User}},
		Retry:    &dag.RetryPolicy{MaxAttempts: 3, InitialInterval: dag.Duration(50 * time.Millisecond)},
		Formulas: []dag.Formula{{ID: "f", Server: "stranger", Nodes: []dag.Node{{Name: "n", Run: "touch " + h.Dir + "/ran"}}}}}
	id := s.mustSubmit(c)
	doc := s.wait(id, 30*time.Second)
	n := doc.Formulas["f"].Nodes["n"]
	if doc.Status != dag.WorkflowFailed || n.Status != dag.NodeFailed || !strings.Contains(n.Error, "host key unknown") || !strings.Contains(n.Error, only0) {
		t.Fatalf("workflow %s, node %+v", doc.Status, n)
	}
	if n.Attempts != 1 {
		t.Errorf("an unknown host key was retried: %d attempts", n.Attempts)
	}
	if _, err := os.Stat(h.Dir + "/ran"); err == nil {
		t.Fatal("the command ran on a host with an unknown key")
	}
}

// A node that times out is killed on its host: no process is left behind.
func TestNodeTimeoutLeavesNoProcess(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	marker := fmt.Sprintf("gantry-e2e-timeout-%d", time.Now().UnixNano())
	c := &dag.Composition{Name: "slow", Hosts: map[string]dag.Host{"h": {Address: h.Addr, User: s.fleet.User}},
		Formulas: []dag.Formula{{ID: "f", Server: "h", Nodes: []dag.Node{{Name: "sleepy", Run: "sleep 300 & sleep 301; echo " + marker, Timeout: dag.Duration(time.Second)}}}}}
	id := s.mustSubmit(c)
	doc := s.wait(id, 30*time.Second)
	n := doc.Formulas["f"].Nodes["sleepy"]
	if n.Status != dag.NodeFailed || !strings.Contains(n.Error, "timed out after 1s") {
		t.Fatalf("node %+v", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := exec.Command("pgrep", "-af", marker).Output()
		if strings.TrimSpace(string(out)) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left on the host:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Re-submitting a succeeded composition runs no command: every node is
// skipped because the host state records it with the same spec.
func TestResubmitRunsNothing(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 3})
	c, hosts := k8sOnFleet(t, s.fleet)
	if d := s.wait(s.mustSubmit(c), 90*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("first run %s", d.Status)
	}
	before := map[string]map[string]int{}
	for n, h := range hosts {
		before[n] = markers(t, h)
	}
	c2, _ := k8sOnFleet(t, s.fleet)
	id := s.mustSubmit(c2)
	doc := s.wait(id, 90*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("second run %s", doc.Status)
	}
	for n, h := range hosts {
		after := markers(t, h)
		for k, v := range after {
			if before[n][k] != v {
				t.Errorf("%s: %s ran again (%d -> %d)", n, k, before[n][k], v)
			}
		}
	}
	for fid, f := range doc.Formulas {
		for name, n := range f.Nodes {
			if n.Status != dag.NodeSkipped {
				t.Errorf("%s/%s = %s, want skipped", fid, name, n.Status)
			}
		}
		if f.Health != nil && f.Health.Status != events.HealthPass {
			t.Errorf("%s: gate not verified again: %+v", fid, f.Health)
		}
	}
	if doc.Formulas["cp-kubernetes"].Health == nil {
		t.Error("the control plane's gate was not checked again on the re-run")
	}
	// reset: true runs everything again.
	c3, _ := k8sOnFleet(t, s.fleet)
	c3.Reset = true
	if d := s.wait(s.mustSubmit(c3), 90*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("reset run %s", d.Status)
	}
	if m := markers(t, hosts["cp-0"]); m["cp-os/swapoff"] != 2 {
		t.Errorf("reset did not re-run: %v", m)
	}
}
