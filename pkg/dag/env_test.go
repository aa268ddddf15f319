package dag_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// A secret is written {"secret": NAME}, and a composition
// with secrets survives its own JSON (records, dispatches) unchanged.
func TestSecretEnv(t *testing.T) {
	doc := `{"name":"s","hosts":{"h1":{"transport":"local"}},"formulas":[{"id":"a","server":"h1",
		"nodes":[{"name":"n","run":"psql -c 'select 1'","env":{"DB_PASS":{"secret":"db_pass"},"PORT":5432}}],
		"health_gate":{"check":"curl -H \"Authorization: $TOKEN\" localhost","timeout":"10s","retries":2,"env":{"TOKEN":{"secret":"api.token"}}}}]}`
	c, err := dag.ParseJSONComposition([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	n := c.Formulas[0].Nodes[0]
	if n.Env["DB_PASS"] != dag.SecretRef("db_pass") || n.Env["PORT"] != dag.Text("5432") {
		t.Errorf("env = %+v", n.Env)
	}
	if g := c.Formulas[0].HealthGate; g.Env["TOKEN"] != dag.SecretRef("api.token") {
		t.Errorf("gate env = %+v", g.Env)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"DB_PASS":{"secret":"db_pass"}`) || !strings.Contains(string(b), `"PORT":"5432"`) {
		t.Errorf("JSON = %s", b)
	}
	again, err := dag.ParseJSONComposition(b)
	if err != nil {
		t.Fatalf("its own JSON does not parse: %v", err)
	}
	if dag.SpecHash(&again.Formulas[0].Nodes[0]) != dag.SpecHash(&n) {
		t.Errorf("spec hash changed through JSON")
	}
	var back dag.Composition
	if err := json.Unmarshal(b, &back); err != nil || back.Formulas[0].Nodes[0].Env["DB_PASS"] != dag.SecretRef("db_pass") {
		t.Errorf("encoding/json round trip: %v %+v", err, back.Formulas[0].Nodes[0].Env)
	}
}

func TestEnvValueJSON(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    dag.EnvValue
		wantErr string
	}{
		{`"x"`, dag.Text("x"), ""},
		{`{"secret":"db"}`, dag.SecretRef("db"), ""},
		{`{"secret":"db","x":1}`, dag.EnvValue{}, "unknown field"},
		{`{"secret":"../etc/passwd"}`, dag.EnvValue{}, "not a secret name"},
		{`{}`, dag.EnvValue{}, "not a secret name"},
		{`5`, dag.EnvValue{}, "expected a string"},
	} {
		var v dag.EnvValue
		err := json.Unmarshal([]byte(tc.in), &v)
		switch {
		case tc.wantErr == "" && (err != nil || v != tc.want):
			t.Errorf("%s: %+v %v, want %+v", tc.in, v, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestIsSecretName(t *testing.T) {
	for s, want := range map[string]bool{
		"db_pass": true, "api.token": true, "A-1": true, "_x": true,
		"": false, ".": false, "..": false, "a..b": false, ".hidden": false, "-x": false,
		"a/b": false, "/etc": false, "a b": false, "a\x00": false, strings.Repeat("a", 129): false, strings.Repeat("a", 128): true,
	} {
		if got := dag.IsSecretName(s); got != want {
			t.Errorf("IsSecretName(%q) = %v", s, got)
		}
	}
}
