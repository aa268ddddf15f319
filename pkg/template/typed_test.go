package template_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// typedDoc is a composition whose host h has typed vars (an inventory's
// list, mapping, number and boolean, as their JSON text, named in
// typed_vars), a text var that looks like JSON, and a composition var;
// its node runs run and its health gate checks check.
func typedDoc(run, check string) string {
	return `{"name":"t","vars":{"env":"prod","port":"8080"},"hosts":{"h":{"transport":"local",` +
		`"vars":{"ntp":"[\"0.pool.ntp.org\",\"1.pool.ntp.org\"]","cfg":"{\"port\":8080,\"tls\":true,\"ratio\":1.0,\"names\":[\"a\",\"b\"]}",` +
		`"workers":"4","debug":"true","ratio":"1.0","big":"123456789012345678901234","text":"[1,2]","bad":"not json"},` +
		`"typed_vars":["big","cfg","debug","ntp","ratio","workers"]}},` +
		`"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":` + fmt.Sprintf("%q", run) + `}],` +
		`"health_gate":{"check":` + fmt.Sprintf("%q", check) + `,"timeout":"10s","retries":1}}]}`
}

// TestTypedVarsRender: a host's typed vars reach templates decoded (a
// list ranged over, a mapping's fields, whole numbers compared as
// numbers, booleans), in commands and health gates; composition vars and
// text vars stay text; fromjson and printing a whole list work as before.
func TestTypedVarsRender(t *testing.T) {
	cases := []struct{ name, tmpl, want string }{
		{"range over a typed list", `{{ range .Vars.ntp }}server {{ . }}; {{ end }}`, "server 0.pool.ntp.org; server 1.pool.ntp.org; "},
		{"a mapping's field", `port={{ .Vars.cfg.port }} tls={{ .Vars.cfg.tls }}`, "port=8080 tls=true"},
		{"a list in a mapping", `{{ range .Vars.cfg.names }}{{ . }},{{ end }} {{ index .Vars.cfg.names 1 }}`, "a,b, b"},
		{"a whole number is a number", `{{ if gt .Vars.workers 3 }}many{{ end }} {{ if eq .Vars.cfg.port 8080 }}8080{{ end }}`, "many 8080"},
		{"a boolean is a boolean", `{{ if .Vars.cfg.tls }}tls{{ end }} {{ if .Vars.debug }}debug{{ end }} {{ .Vars.debug }}`, "tls debug true"},
		{"other numbers print as written", `{{ .Vars.ratio }} {{ .Vars.cfg.ratio }} {{ .Vars.big }} {{ .Vars.workers }}`, "1.0 1.0 123456789012345678901234 4"},
		{"a composition var stays text", `{{ if eq .Vars.port "8080" }}text{{ end }} {{ .Vars.env }}`, "text prod"},
		{"a var not typed stays text", `{{ if eq .Vars.text "[1,2]" }}text{{ end }}`, "text"},
		{"a list printed whole is its JSON", `{{ .Vars.ntp }} {{ .Vars.cfg }} {{ printf "%s" .Vars.ntp }} {{ print .Vars.cfg.names }}`,
			`["0.pool.ntp.org","1.pool.ntp.org"] {"names":["a","b"],"port":8080,"ratio":1.0,"tls":true} ["0.pool.ntp.org","1.pool.ntp.org"] ["a","b"]`},
		{"shq quotes a typed value's text", `{{ shq .Vars.ntp }} {{ shq .Vars.workers }} {{ shq .Vars.debug }}`, `'["0.pool.ntp.org","1.pool.ntp.org"]' '4' 'true'`},
		{"fromjson still works", `{{ range fromjson .Vars.ntp }}{{ . }} {{ end }}{{ (fromjson .Vars.cfg).port }} {{ range fromjson .Vars.text }}{{ . }}{{ end }}`, "0.pool.ntp.org 1.pool.ntp.org 8080 12"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := loadFleet(t, typedDoc(tc.tmpl, tc.tmpl))
			f := c.Formulas[0]
			if got := f.Nodes[0].Run; got != tc.want {
				t.Errorf("run rendered %q, want %q", got, tc.want)
			}
			if got := f.HealthGate.Check; got != tc.want {
				t.Errorf("health gate rendered %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTypedVarsRefused: a typed var that is not JSON, a typed list
// compared with text, a mapping's missing field: each is a template
// problem with its path.
func TestTypedVarsRefused(t *testing.T) {
	cases := []struct{ name, run, msg string }{
		{"a field the mapping lacks", `{{ .Vars.cfg.nope }}echo`, `no key "nope" in that mapping`},
		{"a var set nowhere", `{{ .Vars.nope }}echo`, `var "nope" is not set`},
		{"a var set nowhere, read as $.Vars", `{{ range fromjson .Vars.ntp }}{{ $.Vars.nope }}{{ end }}echo`, `var "nope" is not set`},
		{"a typed number compared with text", `{{ if eq .Vars.workers "4" }}{{ end }}echo`, "incompatible types for comparison"},
		{"range over a typed number", `{{ range .Vars.workers }}{{ end }}echo`, "range over a number is not allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refusedWithin(t, typedDoc(tc.run, "true"), "formulas[0].nodes[0].run", tc.msg)
		})
	}
	bad := strings.Replace(typedDoc("{{ .Host }}", "true"), `"typed_vars":["big"`, `"typed_vars":["bad","big"`, 1)
	refusedWithin(t, bad, "formulas[0]", "vars.bad is a typed var (typed_vars) but its value is not JSON")
}

// TestTypedListLoopsBounded: ranging over a large typed list in nested
// loops costs its items' runs, as over fromjson's list, and printing it
// counts in what a template renders.
func TestTypedListLoopsBounded(t *testing.T) {
	items := make([]string, 3000)
	for i := range items {
		items[i] = fmt.Sprintf(`"%d"`, i)
	}
	doc := func(run string) string {
		return `{"name":"t","hosts":{"h":{"transport":"local","vars":{"l":` + fmt.Sprintf("%q", "["+strings.Join(items, ",")+"]") + `},"typed_vars":["l"]}},` +
			`"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":` + fmt.Sprintf("%q", run) + `}]}]}`
	}
	refusedWithin(t, doc(`{{ range .Vars.l }}{{ range $.Vars.l }}{{ range $.Vars.l }}{{ end }}{{ end }}{{ end }}echo`), "formulas[0].nodes[0].run", "takes more than")
	refusedWithin(t, doc(`{{ range .Vars.l }}{{ range $.Vars.l }}{{ $.Vars.l }}{{ end }}{{ end }}echo`), "formulas[0].nodes[0].run", "renders to more than 262144 bytes")
}

// TestTypedVarOverriddenByAnExtraVar: an extra var (--var) over a typed
// var is text, as every extra var is.
func TestTypedVarOverriddenByAnExtraVar(t *testing.T) {
	doc := strings.Replace(typedDoc(`{{ if eq .Vars.workers "8" }}text{{ end }}`, "true"), `{"name":"t",`, `{"name":"t","extra_vars":{"workers":"8"},`, 1)
	if got := loadFleet(t, doc).Formulas[0].Nodes[0].Run; got != "text" {
		t.Errorf("rendered %q", got)
	}
}

// TestFleetTypedEnvFilesRender: TestFleetEnvFilesRender's fleet with a
// typed var on every host (whose templates print through gantry_print)
// renders within the steps too.
func TestFleetTypedEnvFilesRender(t *testing.T) {
	vars := make([]string, 30)
	for i := range vars {
		vars[i] = fmt.Sprintf(`"var_%d":"value-%d"`, i, i)
	}
	hosts := make([]string, 5000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf(`"h%d":{"transport":"local","labels":{"r":"x"},"vars":{"ntp":"[\"a\",\"b\"]"},"typed_vars":["ntp"]}`, i)
	}
	nodes := make([]string, 5)
	for i := range nodes {
		nodes[i] = fmt.Sprintf(`{"name":"n%d","run":%q}`, i, `cat > /etc/app.env <<'EOF'
{{ range $k, $v := .Vars }}export {{ $k }}={{ shq $v }}
{{ end }}EOF`)
	}
	doc := `{"name":"t","vars":{` + strings.Join(vars, ",") + `},"hosts":{` + strings.Join(hosts, ",") + `},"groups":{"g":{"labels":{"r":"x"}}},` +
		`"formulas":[{"id":"f","group":"g","nodes":[` + strings.Join(nodes, ",") + `]}]}`
	c := loadFleet(t, doc)
	if got := c.Formulas[0].Nodes[0].Run; !strings.Contains(got, "export var_9='value-9'\n") || !strings.Contains(got, `export ntp='["a","b"]'`) {
		t.Errorf("rendered %q", got)
	}
}

// TestTypedVarSpecHash: a node's spec hash changes when a typed var its
// command ranges over changes, and not otherwise.
func TestTypedVarSpecHash(t *testing.T) {
	run := `{{ range .Vars.ntp }}server {{ . }}; {{ end }}`
	hash := func(doc string) string { return dag.SpecHash(&loadFleet(t, doc).Formulas[0].Nodes[0]) }
	a, b := hash(typedDoc(run, "true")), hash(typedDoc(run, "true"))
	changed := hash(strings.Replace(typedDoc(run, "true"), `1.pool.ntp.org`, `2.pool.ntp.org`, 1))
	if a != b || a == changed {
		t.Errorf("hashes %s, %s, changed %s", a, b, changed)
	}
}
