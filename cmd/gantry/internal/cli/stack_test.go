package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/cmd/gantry/devstack/devstacktest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
)

// devStack is the real NATS server (JetStream, auth on) with the four
// services running against it, as gantry dev runs them.
type devStack struct {
	url, operator, viewer string
}

// startDevStack starts a dev stack for the test, and waits until the
// planner and the state-store answer.
func startDevStack(t *testing.T) *devStack {
	t.Helper()
	ns := natstest.Start(t)
	devstacktest.Start(t, ns)
	s := &devStack{url: ns.URL(), operator: ns.Keys.SeedFile(events.Operator), viewer: ns.Keys.SeedFile(events.Viewer)}
	code, out, errOut := run(t, s.as(s.operator, "ping", "--service", "gantry-planner", "--service", "gantry-state-store", "--wait", "60s")...)
	if code != ExitOK {
		t.Fatalf("the dev stack did not come up: exit %d\n%s%s", code, out, errOut)
	}
	return s
}

// as is args with the stack's server and the identity whose seed is given.
func (s *devStack) as(seed string, args ...string) []string {
	return append(args, "--server", s.url, "--nkey", seed)
}

// gantry runs gantry as the operator against the stack.
func (s *devStack) gantry(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return run(t, s.as(s.operator, args...)...)
}

// compositionFile writes a composition into a temporary directory.
func compositionFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// twoFormulas runs a on host me, then b after it; each prints its name.
const twoFormulas = `name: two
hosts: {me: {transport: local}}
formulas:
  - id: a
    server: me
    nodes: [{name: n, run: echo line-of-a}]
  - id: b
    server: me
    depends_on: [a]
    nodes: [{name: m, run: echo line-of-b}]
reset: true
`

// submitted submits a composition and returns its workflow id.
func (s *devStack) submitted(t *testing.T, file string) string {
	t.Helper()
	code, out, errOut := s.gantry(t, "submit", "-q", file)
	if code != ExitOK {
		t.Fatalf("submit %s: exit %d\n%s%s", file, code, out, errOut)
	}
	return strings.TrimSpace(out)
}

// uniquePrefix is the shortest start of id that no other of ids starts
// with.
func uniquePrefix(id string, ids []string) string {
	for n := 1; n <= len(id); n++ {
		p, unique := id[:n], true
		for _, o := range ids {
			if o != id && strings.HasPrefix(o, p) {
				unique = false
			}
		}
		if unique {
			return p
		}
	}
	return id
}

// sharedPrefix is the longest start two of ids share, and those two.
func sharedPrefix(ids []string) (string, []string) {
	best, pair := "", []string(nil)
	for i, a := range ids {
		for _, b := range ids[i+1:] {
			n := 0
			for n < len(a) && n < len(b) && a[n] == b[n] {
				n++
			}
			if n > len(best) {
				best, pair = a[:n], []string{a, b}
			}
		}
	}
	return best, pair
}
