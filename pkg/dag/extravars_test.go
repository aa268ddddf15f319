package dag_test

import (
	"encoding/json"
	"maps"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Extra vars (--var, --var-file) win over the composition's vars and over
// a host's own; the composition keeps them, as they were given.
func TestExtraVarsPrecedence(t *testing.T) {
	c, err := load(t, `{"name":"t","vars":{"a":"comp","b":"comp","c":"comp"},
		"extra_vars":{"c":"extra","d":"extra"},
		"hosts":{"10.0.0.5":{"address":"127.0.0.1","vars":{"b":"host","c":"host"}},"h2":{"transport":"local"}},
		"formulas":[{"id":"x","server":"10.0.0.5","nodes":[{"name":"n","run":"{{ .Vars.a }} {{ .Vars.b }} {{ .Vars.c }} {{ .Vars.d }}"}]},
		            {"id":"y","server":"h2","nodes":[{"name":"n","run":"{{ .Vars.a }} {{ .Vars.b }} {{ .Vars.c }} {{ .Vars.d }}"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Formulas[0].Nodes[0].Run; got != "comp host extra extra" {
		t.Errorf("host with vars: %q, want comp host extra extra", got)
	}
	if got := c.Formulas[1].Nodes[0].Run; got != "comp comp extra extra" {
		t.Errorf("host without vars: %q, want comp comp extra extra", got)
	}
	b, _ := json.Marshal(c)
	var back struct {
		ExtraVars map[string]string `json:"extra_vars"`
	}
	if json.Unmarshal(b, &back); !maps.Equal(back.ExtraVars, map[string]string{"c": "extra", "d": "extra"}) {
		t.Errorf("the composition keeps %v", back.ExtraVars)
	}
	_, err = load(t, `{"name":"t","extra_vars":{"x":[1]},"hosts":{"h":{"transport":"local"}},"formulas":[{"id":"x","server":"h","nodes":[{"name":"n","run":"true"}]}]}`)
	if ps := problemsOf(t, err); len(ps) != 1 || ps[0].Path != "extra_vars.x" || ps[0].Message != "expected a string, number or boolean, got list" {
		t.Errorf("a list as an extra var: %v", ps)
	}
}

// Secret-looking names are shown masked.
func TestShownVarsMasksSecretLookingNames(t *testing.T) {
	got := dag.ShownVars(map[string]string{"env": "prod", "db_password": "hunter2", "API_TOKEN": "t", "ssh_key": "k", "port": "80"})
	want := map[string]string{"env": "prod", "db_password": "***", "API_TOKEN": "***", "ssh_key": "***", "port": "80"}
	if !maps.Equal(got, want) {
		t.Errorf("ShownVars = %v, want %v", got, want)
	}
	if dag.ShownVars(nil) != nil {
		t.Error("no vars: nil")
	}
}
