package e2e

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// jumpComposition runs one gated node on "web", reached via "bastion".
func jumpComposition(f *sshtest.Fleet) *dag.Composition {
	bastion, web := f.Hosts[0], f.Hosts[1]
	return &dag.Composition{Name: "jump", Hosts: map[string]dag.Host{
		"bastion": {Address: bastion.Addr, User: f.User},
		"web":     {Address: web.Addr, User: f.User, Via: "bastion"},
	}, Formulas: []dag.Formula{{ID: "app", Server: "web",
		Nodes:      []dag.Node{{Name: "conf", Run: "echo via > " + web.Dir + "/ran"}},
		HealthGate: &dag.HealthGate{Check: "grep -q via " + web.Dir + "/ran", Timeout: dag.Duration(5 * time.Second), Retries: 2}}}}
}

// A host with `via:` another host runs its node and its health gate
// through that jump host: web listens on 127.0.0.2, and the bastion's
// sshd forwarded there for the executor and for the health-gate.
func TestJumpHostComposition(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 2, ssh: sshtest.Options{Listen: map[int]string{1: "127.0.0.2"}, LogLevel: "DEBUG1"}})
	bastion, web := s.fleet.Hosts[0], s.fleet.Hosts[1]
	doc := s.wait(s.mustSubmit(jumpComposition(s.fleet)), 60*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s: %+v", doc.Status, doc.Formulas["app"])
	}
	if b, err := os.ReadFile(web.Dir + "/ran"); err != nil || string(b) != "via\n" {
		t.Fatalf("the node did not run on web: %q %v", b, err)
	}
	host, port, _ := net.SplitHostPort(web.Addr)
	log := bastion.Log()
	if n := strings.Count(log, "target "+host+" port "+port); n < 2 {
		t.Fatalf("the bastion forwarded to %s %d times, want the node's and the gate's connections; its log:\n%s", web.Addr, n, log)
	}
}

// A jump host whose key is not in known_hosts is refused: the node fails
// with the refusal, naming the jump host, and nothing runs behind it.
func TestJumpHostUnknownKeyRefused(t *testing.T) {
	var onlyWeb string
	s := newStack(t, stackOptions{hosts: 2, knownHosts: func(f *sshtest.Fleet) string {
		b, _ := os.ReadFile(f.KnownHosts)
		onlyWeb = f.Dir + "/known_hosts_web"
		os.WriteFile(onlyWeb, []byte(strings.Split(string(b), "\n")[1]+"\n"), 0o600)
		return onlyWeb
	}})
	bastion, web := s.fleet.Hosts[0], s.fleet.Hosts[1]
	doc := s.wait(s.mustSubmit(jumpComposition(s.fleet)), 30*time.Second)
	n := doc.Formulas["app"].Nodes["conf"]
	if doc.Status != dag.WorkflowFailed || n.Status != dag.NodeFailed {
		t.Fatalf("workflow %s, node %+v", doc.Status, n)
	}
	t.Logf("node error: %s", n.Error)
	for _, want := range []string{"jump host " + s.fleet.User + "@" + bastion.Addr, "host key unknown", "ssh-keyscan", onlyWeb} {
		if !strings.Contains(n.Error, want) {
			t.Errorf("node error %q does not say %q", n.Error, want)
		}
	}
	if n.Attempts != 1 {
		t.Errorf("an unknown jump host key was retried: %d attempts", n.Attempts)
	}
	if _, err := os.Stat(web.Dir + "/ran"); err == nil {
		t.Fatal("the command ran behind a jump host with an unknown key")
	}
}
