package composition_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
)

const becomeDoc = `name: t
hosts:
  web: {address: 10.0.0.5, user: deploy, become: true, identity_file: ~/.ssh/fleet_ed25519}
  app: {address: 10.0.0.6, become: true, become_user: app}
formulas:
  - id: f
    server: web
    nodes:
      - {name: a, run: "true"}
      - {name: b, run: "true", become: false}
  - id: g
    server: app
    nodes:
      - {name: c, run: "true", become_user: db}
`

// become, become_user and identity_file read from YAML; a bad one is
// reported with its line.
func TestBecomeYAML(t *testing.T) {
	c, err := composition.Load("c.yaml", []byte(becomeDoc))
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Hosts["web"]; !h.Become || h.IdentityFile != "~/.ssh/fleet_ed25519" || c.Hosts["app"].BecomeUser != "app" {
		t.Fatalf("hosts %+v", c.Hosts)
	}
	n := c.Formulas[0].Nodes
	if b, _ := dag.Becomes(n[0].Become, n[0].BecomeUser); !b {
		t.Error("node a does not become")
	}
	if b, _ := dag.Becomes(n[1].Become, n[1].BecomeUser); b {
		t.Error("node b becomes despite become: false")
	}
	if b, u := dag.Becomes(c.Formulas[1].Nodes[0].Become, c.Formulas[1].Nodes[0].BecomeUser); !b || u != "db" {
		t.Errorf("node c: %v %q, want db", b, u)
	}
	bad := strings.Replace(becomeDoc, "  app: {", "  me: {transport: local, become: true}\n  app: {", 1)
	_, err = composition.Load("c.yaml", []byte(bad))
	var inv *dag.InvalidError
	if !errors.As(err, &inv) || len(inv.Problems) != 1 || inv.Problems[0].Path != "hosts.me.become" || inv.Problems[0].Line != 4 {
		t.Fatalf("err %v, want hosts.me.become at line 4", err)
	}
}
