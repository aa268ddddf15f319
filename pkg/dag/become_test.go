package dag_test

import (
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// become and become_user: the node's over its formula's over its host's,
// each on its own; become_user alone does not become (as in Ansible).
// Normalize writes what applies onto each formula (its health gate) and
// node that becomes, and the dispatch reads it there.
func TestBecomeResolution(t *testing.T) {
	type got struct {
		formula, node string // "" for no become, else the user ("root" for sudo's default)
	}
	cases := []struct {
		name                string
		host, formula, node string // JSON fields
		want                got
	}{
		{"nothing", ``, ``, ``, got{}},
		{"host", `"become":true`, ``, ``, got{"root", "root"}},
		{"host with user", `"become":true,"become_user":"app"`, ``, ``, got{"app", "app"}},
		{"formula off", `"become":true`, `"become":false,`, ``, got{}},
		{"node on again", `"become":true`, `"become":false,`, `"become":true,`, got{"", "root"}},
		{"node off", `"become":true`, ``, `"become":false,`, got{"root", ""}},
		{"user alone", `"become_user":"app"`, ``, `"become_user":"db",`, got{}},
		{"node user over host user", `"become":true,"become_user":"app"`, ``, `"become_user":"db",`, got{"app", "db"}},
		{"formula user, node on", ``, `"become_user":"app",`, `"become":true,`, got{"", "app"}},
		{"formula on", ``, `"become":true,"become_user":"app",`, ``, got{"app", "app"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host := `"address":"10.0.0.1"`
			if c.host != "" {
				host += "," + c.host
			}
			doc := `{"name":"t","hosts":{"h":{` + host + `}},"formulas":[{"id":"f","server":"h",` + c.formula +
				`"health_gate":{"check":"true","timeout":"10s","retries":1},"nodes":[{` + c.node + `"name":"n","run":"true"}]}]}`
			comp, err := load(t, doc)
			if err != nil {
				t.Fatal(err)
			}
			f := &comp.Formulas[0]
			as := func(b *bool, u string) string {
				on, user := dag.Becomes(b, u)
				switch {
				case !on:
					return ""
				case user == "":
					return "root"
				}
				return user
			}
			if g := (got{as(f.Become, f.BecomeUser), as(f.Nodes[0].Become, f.Nodes[0].BecomeUser)}); g != c.want {
				t.Errorf("formula, node become %+v, want %+v", g, c.want)
			}
			again := *comp
			dag.Normalize(&again) // idempotent
			if g := as(again.Formulas[0].Nodes[0].Become, again.Formulas[0].Nodes[0].BecomeUser); g != c.want.node {
				t.Errorf("normalized again: %q", g)
			}
		})
	}
}

// The spec hash says whom a node becomes, wherever that was set: turning
// become on at the host changes it (drift sees it, and skip does not
// skip), as does another become_user.
func TestBecomeInSpecHash(t *testing.T) {
	hash := func(host string) string {
		t.Helper()
		c, err := load(t, `{"name":"t","hosts":{"h":{"address":"10.0.0.1"`+host+`}},"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":"true"}]}]}`)
		if err != nil {
			t.Fatal(err)
		}
		return dag.PlanLoaded(c).Formulas[0].Nodes[0].SpecHash
	}
	plain, root, app := hash(``), hash(`,"become":true`), hash(`,"become":true,"become_user":"app"`)
	if plain == root || root == app || plain == app {
		t.Fatalf("hashes %s %s %s, want three", plain, root, app)
	}
	if hash(`,"become_user":"app"`) != plain || hash(`,"identity_file":"/k"`) != plain {
		t.Fatal("a become_user that does not apply, or an identity file, changed what the node does")
	}
}

// Bad become and identity_file settings are rejected, each with its path
// and, in YAML, its line.
func TestBecomeValidation(t *testing.T) {
	cases := []struct {
		name, doc, path, msg string
	}{
		{"become on local", `{"name":"t","hosts":{"l":{"transport":"local","become":true}},"formulas":[{"id":"f","server":"l","nodes":[{"name":"n","run":"x"}]}]}`,
			"hosts.l.become", "transport local runs commands as the executor's own user"},
		{"identity_file on local", `{"name":"t","hosts":{"l":{"transport":"local","identity_file":"/k"}},"formulas":[{"id":"f","server":"l","nodes":[{"name":"n","run":"x"}]}]}`,
			"hosts.l.identity_file", "identity_file is for ssh hosts"},
		{"relative identity_file", `{"name":"t","hosts":{"h":{"address":"a","identity_file":"keys/id"}},"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":"x"}]}]}`,
			"hosts.h.identity_file", `identity_file "keys/id" is relative`},
		{"become_user option", `{"name":"t","hosts":{"h":{"address":"a","become_user":"-u"}},"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":"x"}]}]}`,
			"hosts.h.become_user", `become_user "-u" starts with '-'`},
		{"become_user space", `{"name":"t","hosts":{"h":{"address":"a"}},"formulas":[{"id":"f","server":"h","become_user":"a b","nodes":[{"name":"n","run":"x"}]}]}`,
			"formulas[0].become_user", `contains ' '`},
		{"node become_user", `{"name":"t","hosts":{"h":{"address":"a"}},"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":"x","become_user":"#12a"}]}]}`,
			"formulas[0].nodes[0].become_user", "a #uid is # and digits"},
		{"formula becomes on local", `{"name":"t","hosts":{"l":{"transport":"local"}},"formulas":[{"id":"f","server":"l","become":true,"nodes":[{"name":"n","run":"x"}]}]}`,
			"formulas[0].become", `formula "f" runs on host "l" of transport local`},
		{"node becomes on local", `{"name":"t","hosts":{"l":{"transport":"local"}},"formulas":[{"id":"f","server":"l","nodes":[{"name":"n","run":"x","become":true}]}]}`,
			"formulas[0].nodes[0].become", `node "n" runs on host "l" of transport local`},
		{"group formula becomes on a local host", `{"name":"t","hosts":{"l":{"transport":"local","labels":{"r":"w"}}},"groups":{"w":{"labels":{"r":"w"}}},"formulas":[{"id":"f","group":"w","become":true,"nodes":[{"name":"n","run":"x"}]}]}`,
			"formulas[0].become", `runs on host "l" of transport local`},
		{"become not a boolean", `{"name":"t","hosts":{"h":{"address":"a","become":"yes"}},"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":"x"}]}]}`,
			"hosts.h.become", "expected a boolean"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, c.doc)
			if err == nil {
				t.Fatal("accepted")
			}
			found := false
			for _, p := range problemsOf(t, err) {
				if p.Path == c.path && strings.Contains(p.Message, c.msg) {
					found = true
				}
			}
			if !found {
				t.Errorf("problems %v, want %s: %q", err, c.path, c.msg)
			}
		})
	}
}
