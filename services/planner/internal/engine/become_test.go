package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
)

// The dispatch says whom each node becomes (node over formula over host)
// and the host's identity file (a path, never a key), as does each jump
// host's; the gate request, whom the formula's health gate becomes.
func TestDispatchCarriesBecomeAndIdentity(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	must(t, h.submit(`name: w
hosts:
  bastion: {address: 10.0.0.1, identity_file: /keys/bastion}
  h1: {address: 10.0.0.2, via: bastion, become: true, become_user: app, identity_file: ~/.ssh/web}
formulas:
  - id: a
    server: h1
    health_gate: {check: "true", timeout: 10s, retries: 1}
    nodes:
      - {name: x, run: "true"}
      - {name: y, run: "true", become: false}
      - {name: z, run: "true", become_user: db}
`))
	var got []string
	for _, e := range h.out.Stored() {
		if d, ok := e.Payload.(*events.Dispatch); ok {
			got = append(got, fmt.Sprintf("key %s via %s", d.Host.IdentityFile, d.Host.Via[0].IdentityFile))
			for _, n := range d.Nodes {
				got = append(got, fmt.Sprintf("%s %v %s", n.Name, n.Become, n.BecomeUser))
			}
		}
	}
	if s, want := strings.Join(got, ", "), "key ~/.ssh/web via /keys/bastion, x true app, y false , z true db"; s != want {
		t.Fatalf("dispatched %s, want %s", s, want)
	}
	must(t, h.formula("a", 1, "succeeded"))
	for _, e := range h.out.Stored() {
		if g, ok := e.Payload.(*events.GateRequest); ok {
			if !g.Become || g.BecomeUser != "app" || g.Host.IdentityFile != "~/.ssh/web" {
				t.Fatalf("gate request %+v, want become app and the identity file", g)
			}
			return
		}
	}
	t.Fatal("no gate request")
}
