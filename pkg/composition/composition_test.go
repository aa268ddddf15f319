package composition_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
)

const yamlDoc = `
name: eq
retry: {max_attempts: 2}
hosts:
  cp-0: {address: 10.0.0.10, user: root}
formulas:
  - id: base
    server: cp-0
    nodes:
      - name: pkg
        run: apt-get install -y x
        check: command -v x
        delete: apt-get remove -y x
        timeout: 10m
        env: {PORT: 8080, MODE: fast, ON: true}
    health_gate: {check: "true", timeout: 30s, retries: 3}
  - id: app
    server: cp-0
    depends_on: [base]
    nodes:
      - {name: deploy, run: ./deploy.sh}
`

// The same composition in JSON, keys in another order, "600s" for "10m".
const jsonDoc = `{"formulas":[
 {"server":"cp-0","id":"base","health_gate":{"retries":3,"check":"true","timeout":"30s"},
  "nodes":[{"env":{"ON":true,"MODE":"fast","PORT":8080},"timeout":"600s","delete":"apt-get remove -y x","check":"command -v x","run":"apt-get install -y x","name":"pkg"}]},
 {"id":"app","server":"cp-0","depends_on":[{"formula":"base"}],"nodes":[{"name":"deploy","run":"./deploy.sh"}]}],
 "hosts":{"cp-0":{"user":"root","address":"10.0.0.10"}},"retry":{"max_attempts":2},"name":"eq"}`

func TestYAMLAndJSONAreEquivalent(t *testing.T) {
	y, err := composition.Load("c.yaml", []byte(yamlDoc))
	if err != nil {
		t.Fatal(err)
	}
	j, err := composition.Load("c.json", []byte(jsonDoc))
	if err != nil {
		t.Fatal(err)
	}
	hy, hj := dag.SpecHash(&y.Formulas[0].Nodes[0]), dag.SpecHash(&j.Formulas[0].Nodes[0])
	if hy != hj {
		t.Fatalf("spec hash differs: yaml %s json %s", hy, hj)
	}
	if y.Formulas[0].Nodes[0].Env["PORT"] != dag.Text("8080") || y.Formulas[0].Nodes[0].Env["ON"] != dag.Text("true") {
		t.Errorf("env %v", y.Formulas[0].Nodes[0].Env)
	}
	if y.Formulas[1].DependsOn[0].Condition != dag.ConditionHealthy {
		t.Errorf("condition %s", y.Formulas[1].DependsOn[0].Condition)
	}
	// Detection by content when the name says nothing.
	if composition.DetectFormat("-", []byte("  {\"a\":1}")) != composition.FormatJSON || composition.DetectFormat("-", []byte("a: 1")) != composition.FormatYAML {
		t.Error("format detection")
	}
	// JSON is YAML: parsed as YAML it is the same composition too.
	jy, err := composition.Load("c.yaml", []byte(jsonDoc))
	if err != nil {
		t.Fatal(err)
	}
	if dag.SpecHash(&jy.Formulas[0].Nodes[0]) != hy {
		t.Error("JSON read as YAML hashes differently")
	}
}

func TestYAMLProblems(t *testing.T) {
	cases := map[string]struct {
		doc  string
		code dag.Code
		msg  string
		line int
	}{
		"duplicate key":   {"name: a\nname: b\n", dag.CodeDuplicateKey, `key "name" given twice (first on line 1)`, 2},
		"syntax":          {"name: a\n  bad: [\n", dag.CodeSyntax, "invalid YAML", 0},
		"two documents":   {"name: a\n---\nname: b\n", dag.CodeSyntax, "more than one YAML document", 2},
		"empty":           {"", dag.CodeRequired, "empty", 0},
		"complex key":     {"? [a, b]\n: 1\n", dag.CodeType, "mapping keys must be plain names", 1},
		"unknown tag":     {"name: !custom x\n", dag.CodeType, "unsupported YAML tag", 1},
		"too deep":        {"a: " + strings.Repeat("[", 80) + strings.Repeat("]", 80) + "\n", dag.CodeTooDeep, "deeper than 64", 0},
		"too large":       {"name: " + strings.Repeat("x", dag.DefaultMaxBytes), dag.CodeTooLarge, "over the", 0},
		"unknown field":   {"name: a\nhsots: {}\n", dag.CodeUnknownField, `unknown field "hsots" (did you mean "hosts"?)`, 2},
		"merge not a map": {"base: &b [1]\nname:\n  <<: *b\n", dag.CodeType, "merge (<<) needs a mapping", 3},
		"alias bomb": {`a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
`, dag.CodeAliasBomb, "aliases expand too far", 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := composition.Load("c.yaml", []byte(tc.doc))
			var inv *dag.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("want *InvalidError, got %v", err)
			}
			for _, p := range inv.Problems {
				if p.Code == tc.code && strings.Contains(p.Message, tc.msg) && (tc.line == 0 || p.Line == tc.line) {
					return
				}
			}
			t.Fatalf("no %s problem %q (line %d) in:\n%v", tc.code, tc.msg, tc.line, err)
		})
	}
}

func TestYAMLAnchorsAndMerge(t *testing.T) {
	doc := `
name: m
hosts: {h: {transport: local}}
defaults: &defaults {timeout: 5m, delete: "true"}
formulas:
  - id: a
    server: h
    nodes:
      - <<: *defaults
        name: one
        run: echo one
      - <<: *defaults
        name: two
        run: echo two
        timeout: 1m
`
	// "defaults" is not a composition field: it must be reported, not ignored.
	_, err := composition.Load("m.yaml", []byte(doc))
	if err == nil || !strings.Contains(err.Error(), `unknown field "defaults"`) {
		t.Fatalf("err = %v", err)
	}
	// With the anchor inside a known field (x- prefix is not special), use a
	// node list anchor instead.
	doc2 := `
name: m
hosts: {h: {transport: local}}
formulas:
  - id: a
    server: h
    nodes: &nodes
      - &one {name: one, run: echo one, timeout: 5m, delete: "true"}
      - <<: *one
        name: two
        timeout: 1m
  - id: b
    server: h
    nodes: *nodes
`
	c, err := composition.Load("m.yaml", []byte(doc2))
	if err != nil {
		t.Fatal(err)
	}
	two := c.Formulas[0].Nodes[1]
	if two.Run != "echo one" || two.Timeout.D().String() != "1m0s" || two.Delete != "true" {
		t.Errorf("merged node = %+v", two)
	}
	if len(c.Formulas[1].Nodes) != 2 || c.Formulas[1].Nodes[1].Name != "two" {
		t.Errorf("aliased node list = %+v", c.Formulas[1].Nodes)
	}
}

func TestExamplesAreValid(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) < 2 {
		t.Fatalf("examples missing: %v", files)
	}
	for _, f := range files {
		c, err := composition.LoadFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := dag.NewPlan(c); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	k, err := composition.LoadFile("../../examples/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := dag.PlanLoaded(k)
	// os -> containerd -> kubernetes on each host, workers after the control
	// plane's gate, the CNI last.
	if got := p.LevelIDs[len(p.LevelIDs)-1]; len(got) != 1 || got[0] != "cni" {
		t.Errorf("last level %v", got)
	}
	for _, f := range k.Formulas {
		for _, n := range f.Nodes {
			if n.Delete == "" {
				t.Errorf("%s/%s has no delete", f.ID, n.Name)
			}
		}
	}
	w, _ := p.Index("worker-1-kubernetes")
	foundCP := false
	for _, d := range p.Formulas[w].DependsOn {
		if d.Formula == "cp-kubernetes" && d.Condition == dag.ConditionHealthy {
			foundCP = true
		}
	}
	if !foundCP {
		t.Errorf("worker-1 does not wait for the control plane's gate: %+v", p.Formulas[w].DependsOn)
	}
	hello, _ := composition.LoadFile("../../examples/hello.yaml")
	for name, h := range hello.Hosts {
		if h.Transport != dag.TransportLocal {
			t.Errorf("hello host %s is %s, want local", name, h.Transport)
		}
	}
}

func TestReadFileIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte("name: "+strings.Repeat("x", 3*dag.DefaultMaxBytes)), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := composition.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != dag.DefaultMaxBytes+1 {
		t.Fatalf("read %d bytes", len(data))
	}
	// It says it is over the limit, not that it is the bytes it read (it
	// said "document is 1048577 bytes" of a 3 MiB file).
	if _, err := composition.LoadFile(path); !errors.Is(err, dag.ErrInvalid) || !strings.Contains(err.Error(), "document is over the 1048576-byte limit") {
		t.Fatalf("err = %v", err)
	}
	if _, err := composition.LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || errors.Is(err, dag.ErrInvalid) {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzParseYAML: any bytes give a composition or an *InvalidError; no
// panic, no hang, no unbounded expansion.
func FuzzParseYAML(f *testing.F) {
	f.Add([]byte(yamlDoc))
	f.Add([]byte(jsonDoc))
	f.Add([]byte("a: &a [1]\nb: [*a, *a]\n"))
	f.Add([]byte("<<: {a: 1}\n"))
	f.Add([]byte("a: &x\n  b: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := composition.Load("f.yaml", data)
		if err != nil {
			var inv *dag.InvalidError
			if !errors.As(err, &inv) || len(inv.Problems) == 0 {
				t.Fatalf("not an *InvalidError: %T %v", err, err)
			}
			return
		}
		dag.PlanLoaded(c)
	})
}

// A secret in YAML is a one-key mapping; a bad one is named with its path
// and line.
func TestYAMLSecrets(t *testing.T) {
	doc := `name: s
hosts: {h1: {transport: local}}
formulas:
  - id: a
    server: h1
    nodes:
      - name: db
        run: psql "postgres://app:$DB_PASS@db/app" -c 'select 1'
        env:
          DB_PASS: {secret: db_pass}
          PORT: 5432
`
	c, err := composition.Load("c.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if env := c.Formulas[0].Nodes[0].Env; env["DB_PASS"] != dag.SecretRef("db_pass") || env["PORT"] != dag.Text("5432") {
		t.Errorf("env = %+v", env)
	}
	bad := strings.Replace(doc, "{secret: db_pass}", "{secret: ../db_pass}", 1)
	_, err = composition.Load("c.yaml", []byte(bad))
	var inv *dag.InvalidError
	if !errors.As(err, &inv) || len(inv.Problems) != 1 {
		t.Fatalf("want one problem, got %v", err)
	}
	if p := inv.Problems[0]; p.Path != `formulas[0].nodes[0].env["DB_PASS"].secret` || p.Line != 10 || !strings.Contains(p.Message, `"../db_pass" is not a secret name`) {
		t.Errorf("problem = %+v", p)
	}
}
