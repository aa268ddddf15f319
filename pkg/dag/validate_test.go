package dag_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// base wraps formulas (a JSON list body) in a composition with two hosts.
func base(formulas string) string {
	return `{"name":"t","hosts":{"h1":{"address":"10.0.0.1:22","user":"root"},"h2":{"transport":"local"}},"formulas":[` + formulas + `]}`
}

const okFormula = `{"id":"a","server":"h1","nodes":[{"name":"n1","run":"true"}]}`

func load(t *testing.T, doc string) (*dag.Composition, error) {
	t.Helper()
	return dag.ParseJSONComposition([]byte(doc))
}

func problemsOf(t *testing.T, err error) []dag.Problem {
	t.Helper()
	var inv *dag.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("expected *InvalidError, got %T: %v", err, err)
	}
	if !errors.Is(err, dag.ErrInvalid) {
		t.Fatalf("errors.Is(err, ErrInvalid) = false")
	}
	return inv.Problems
}

// want is a problem a validation case expects: its path ("*": any), code
// and a substring of its message.
type want struct {
	path string
	code dag.Code
	msg  string // substring
}

// validationCase is an invalid composition and the problems it must get.
type validationCase struct {
	name string
	doc  string
	want []want
}

// validationCases are the corpus of invalid compositions:
// TestValidationErrors holds the decoder and validator to them, and
// TestSchemaRejectsStructuralProblems docs/composition.schema.json.
func validationCases() []validationCase {
	return []validationCase{
		{"empty formula list", base(``), []want{{"formulas", dag.CodeRequired, "at least one formula"}}},
		{"no formulas field", `{"name":"t","hosts":{}}`, []want{{"formulas", dag.CodeRequired, "at least one formula"}}},
		{"formula cycle named", base(`
			{"id":"alpha","server":"h1","depends_on":["beta"],"nodes":[{"name":"n","run":"x"}]},
			{"id":"beta","server":"h1","depends_on":["gamma"],"nodes":[{"name":"n","run":"x"}]},
			{"id":"gamma","server":"h1","depends_on":["alpha"],"nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].depends_on", dag.CodeCycle, "alpha -> beta -> gamma -> alpha"}}},
		{"two separate cycles", base(`
			{"id":"a","server":"h1","depends_on":["b"],"nodes":[{"name":"n","run":"x"}]},
			{"id":"b","server":"h1","depends_on":["a"],"nodes":[{"name":"n","run":"x"}]},
			{"id":"c","server":"h1","depends_on":["d"],"nodes":[{"name":"n","run":"x"}]},
			{"id":"d","server":"h1","depends_on":["c"],"nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].depends_on", dag.CodeCycle, "a -> b -> a"}, {"formulas[2].depends_on", dag.CodeCycle, "c -> d -> c"}}},
		{"formula self-dependency", base(`{"id":"a","server":"h1","depends_on":["a"],"nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].depends_on[0]", dag.CodeCycle, `formula "a" depends on itself`}}},
		{"node cycle named", base(`{"id":"a","server":"h1","max_parallel":2,"nodes":[
			{"name":"x","run":"x","depends_on":["z"]},{"name":"y","run":"x","depends_on":["x"]},{"name":"z","run":"x","depends_on":["y"]}]}`),
			[]want{{"formulas[0].nodes[0].depends_on", dag.CodeCycle, `formula "a": x -> z -> y -> x`}}},
		{"node cycle through default order", base(`{"id":"a","server":"h1","nodes":[
			{"name":"x","run":"x","depends_on":["y"]},{"name":"y","run":"x"}]}`),
			[]want{{"formulas[0].nodes[0].depends_on", dag.CodeCycle, "x -> y -> x"}}},
		{"node self-dependency", base(`{"id":"a","server":"h1","nodes":[{"name":"x","run":"x","depends_on":["x"]}]}`),
			[]want{{"formulas[0].nodes[0].depends_on[0]", dag.CodeCycle, `node "x" depends on itself`}}},
		{"duplicate formula id", base(okFormula + `,` + okFormula),
			[]want{{"formulas[1].id", dag.CodeDuplicate, `duplicate formula id "a" (also formulas[0])`}}},
		{"duplicate node name", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x"},{"name":"n","run":"y"}]}`),
			[]want{{"formulas[0].nodes[1].name", dag.CodeDuplicate, `duplicate node name "n"`}}},
		{"unknown formula reference", base(`{"id":"a","server":"h1","depends_on":[{"formula":"x"}],"nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].depends_on[0]", dag.CodeUnknownRef, `unknown formula "x"`}}},
		{"unknown node reference", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","depends_on":["ghost"]}]}`),
			[]want{{"formulas[0].nodes[0].depends_on[0]", dag.CodeUnknownRef, `unknown node "ghost" in formula "a"`}}},
		{"unknown target", strings.Replace(base(okFormula), `"formulas"`, `"targets":["ghost"],"formulas"`, 1),
			[]want{{"targets[0]", dag.CodeUnknownRef, `unknown target "ghost"`}}},
		{"rerun not formula/node", strings.Replace(base(okFormula), `"formulas"`, `"rerun":["n"],"formulas"`, 1),
			[]want{{"rerun[0]", dag.CodeValue, `rerun "n": name a node as formula/node`}}},
		{"rerun unknown formula", strings.Replace(base(okFormula), `"formulas"`, `"rerun":["ghost/n"],"formulas"`, 1),
			[]want{{"rerun[0]", dag.CodeUnknownRef, `no formula (or instance of a group formula) "ghost"`}}},
		{"rerun unknown node", strings.Replace(base(okFormula), `"formulas"`, `"rerun":["a/ghost"],"formulas"`, 1),
			[]want{{"rerun[0]", dag.CodeUnknownRef, `rerun "a/ghost": formula a has no node ghost`}}},
		{"rerun twice", strings.Replace(base(okFormula), `"formulas"`, `"rerun":["a/n1","a/n1"],"formulas"`, 1),
			[]want{{"rerun[1]", dag.CodeDuplicate, `rerun "a/n1" is listed twice`}}},
		{"rerun on a delete", strings.Replace(base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","delete":"y"}]}`), `"formulas"`, `"operation":"delete","rerun":["a/n"],"formulas"`, 1),
			[]want{{"rerun", dag.CodeValue, "rerun applies to a create, not to operation delete"}}},
		{"server missing from hosts", base(`{"id":"a","server":"h9","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].server", dag.CodeUnknownRef, `server "h9" is not listed in hosts`}}},
		{"missing server", base(`{"id":"a","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].server", dag.CodeRequired, "server is required"}}},
		{"name with dot", base(`{"id":"a.b","server":"h1","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].id", dag.CodeToken, `"a.b" contains '.'`}}},
		{"name with space", base(`{"id":"a","server":"h1","nodes":[{"name":"my node","run":"x"}]}`),
			[]want{{"formulas[0].nodes[0].name", dag.CodeToken, `contains ' '`}}},
		{"name with star", base(`{"id":"a*","server":"h1","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].id", dag.CodeToken, `contains '*'`}}},
		{"name with gt", base(`{"id":"a>","server":"h1","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].id", dag.CodeToken, `contains '>'`}}},
		{"non-ASCII name", base(`{"id":"café","server":"h1","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].id", dag.CodeToken, "non-ASCII"}}},
		{"upper-case host", `{"name":"t","hosts":{"CP":{"transport":"local"}},"formulas":[{"id":"a","server":"CP","nodes":[{"name":"n","run":"x"}]}]}`,
			[]want{{`hosts["CP"]`, dag.CodeToken, "upper-case"}}},
		{"name too long", base(`{"id":"` + strings.Repeat("a", 64) + `","server":"h1","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].id", dag.CodeToken, "at most 63"}}},
		{"leading dash", base(`{"id":"-a","server":"h1","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].id", dag.CodeToken, "starts with '-'"}}},
		{"bad workflow name", strings.Replace(base(okFormula), `"name":"t"`, `"name":"my workflow"`, 1),
			[]want{{"name", dag.CodeToken, "would break NATS subjects"}}},
		{"missing name", strings.Replace(base(okFormula), `"name":"t",`, ``, 1),
			[]want{{"name", dag.CodeRequired, "name is required"}}},
		{"missing run for create", base(`{"id":"a","server":"h1","nodes":[{"name":"n","check":"true"}]}`),
			[]want{{"formulas[0].nodes[0].run", dag.CodeRequired, "run is required for operation create"}}},
		{"missing delete for delete", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","operation":"delete"`, 1),
			[]want{{"formulas[0].nodes[0].delete", dag.CodeRequired, "delete is required"}}},
		{"bad duration", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","timeout":"10 minutes"}]}`),
			[]want{{"formulas[0].nodes[0].timeout", dag.CodeValue, `bad duration "10 minutes"`}}},
		{"duration too long", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","timeout":"99999999999h"}]}`),
			[]want{{"formulas[0].nodes[0].timeout", dag.CodeValue, `duration "99999999999h" is too long: at most 2562047h`}}},
		{"duration of a unit alone", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","timeout":".s"}]}`),
			[]want{{"formulas[0].nodes[0].timeout", dag.CodeValue, `bad duration ".s"`}}},
		{"retry max_attempts out of range", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","retry":{"max_attempts":9223372036854775807}`, 1),
			[]want{{"retry.max_attempts", dag.CodeValue, "9223372036854775807 is out of range"}}},
		{"duration as number", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","timeout":600}]}`),
			[]want{{"formulas[0].nodes[0].timeout", dag.CodeType, `expected a duration string`}}},
		{"negative timeout", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","timeout":"-5s"}]}`),
			[]want{{"formulas[0].nodes[0].timeout", dag.CodeValue, "greater than 0"}}},
		{"composition timeout bad duration", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","timeout":"5 minutes"`, 1),
			[]want{{"timeout", dag.CodeValue, `bad duration "5 minutes"`}}},
		{"composition timeout as number", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","timeout":300`, 1),
			[]want{{"timeout", dag.CodeType, `expected a duration string`}}},
		{"composition timeout zero", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","timeout":"0s"`, 1),
			[]want{{"timeout", dag.CodeValue, "greater than 0 (leave it out for none)"}}},
		{"formula timeout bad duration", base(`{"id":"a","server":"h1","timeout":"soon","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].timeout", dag.CodeValue, `bad duration "soon"`}}},
		{"formula timeout negative", base(`{"id":"a","server":"h1","timeout":"-3s","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].timeout", dag.CodeValue, "greater than 0"}}},
		{"formula timeout too long", base(`{"id":"a","server":"h1","timeout":"99999999999h","nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].timeout", dag.CodeValue, `duration "99999999999h" is too long`}}},
		{"retry max_attempts zero", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","retry":{"max_attempts":0}`, 1),
			[]want{{"retry.max_attempts", dag.CodeValue, "between 1 and 100"}}},
		{"retry multiplier below one", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","retry":{"max_attempts":2,"multiplier":0.5}`, 1),
			[]want{{"retry.multiplier", dag.CodeValue, "between 1 and 100"}}},
		{"retry max below initial", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","retry":{"max_attempts":2,"initial_interval":"1m","max_interval":"1s"}`, 1),
			[]want{{"retry.max_interval", dag.CodeValue, "less than initial_interval"}}},
		{"node retry bad", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","retry":{"max_attempts":1000}}]}`),
			[]want{{"formulas[0].nodes[0].retry.max_attempts", dag.CodeValue, "between 1 and 100"}}},
		{"max_parallel zero", base(`{"id":"a","server":"h1","max_parallel":0,"nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].max_parallel", dag.CodeValue, "at least 1"}}},
		{"max_parallel too large", base(`{"id":"a","server":"h1","max_parallel":5000,"nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].max_parallel", dag.CodeValue, "out of range"}}},
		{"max_parallel not integer", base(`{"id":"a","server":"h1","max_parallel":1.5,"nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[0].max_parallel", dag.CodeType, "whole number"}}},
		{"bad transport", `{"name":"t","hosts":{"h1":{"transport":"telnet"}},"formulas":[` + okFormula + `]}`,
			[]want{{"hosts.h1.transport", dag.CodeValue, `unknown transport "telnet"`}}},
		{"bad port", `{"name":"t","hosts":{"h1":{"address":"a:0"}},"formulas":[` + okFormula + `]}`,
			[]want{{"hosts.h1.address", dag.CodeValue, "bad port"}}},
		{"bad operation", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","operation":"destroy"`, 1),
			[]want{{"operation", dag.CodeValue, `unknown operation "destroy"`}}},
		{"bad on_failure", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","on_failure":"ignore"`, 1),
			[]want{{"on_failure", dag.CodeValue, `unknown on_failure "ignore"`}}},
		{"bad condition", base(okFormula + `,{"id":"b","server":"h1","depends_on":[{"formula":"a","condition":"done"}],"nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[1].depends_on[0].condition", dag.CodeValue, `unknown condition "done"`}}},
		{"healthy without gate", base(okFormula + `,{"id":"b","server":"h1","depends_on":[{"formula":"a","condition":"healthy"}],"nodes":[{"name":"n","run":"x"}]}`),
			[]want{{"formulas[1].depends_on[0].condition", dag.CodeValue, `formula "a" has no health_gate`}}},
		{"gate without check", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x"}],"health_gate":{"timeout":"10s","retries":3}}`),
			[]want{{"formulas[0].health_gate.check", dag.CodeRequired, "needs a check"}}},
		{"gate check too large", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x"}],"health_gate":{"check":"` + strings.Repeat("x", dag.MaxScript+1) + `","timeout":"10s","retries":3}}`),
			[]want{{"formulas[0].health_gate.check", dag.CodeTooLarge, "more than the 120 KiB a script may be"}}},
		{"run too large", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"` + strings.Repeat("x", dag.MaxScript+1) + `"}]}`),
			[]want{{"formulas[0].nodes[0].run", dag.CodeTooLarge, "122881 bytes once quoted (a single quote counts 13), more than the 120 KiB a script may be"}}},
		{"run too large once quoted", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"` + strings.Repeat("echo 'a'; ", 8000) + `"}]}`),
			[]want{{"formulas[0].nodes[0].run", dag.CodeTooLarge, "272000 bytes once quoted"}}},
		{"gate without timeout", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x"}],"health_gate":{"check":"true","retries":3}}`),
			[]want{{"formulas[0].health_gate.timeout", dag.CodeRequired, "needs a timeout"}}},
		{"gate without retries", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x"}],"health_gate":{"check":"true","timeout":"10s"}}`),
			[]want{{"formulas[0].health_gate.retries", dag.CodeRequired, "needs retries"}}},
		{"formula without nodes", base(`{"id":"a","server":"h1","nodes":[]}`),
			[]want{{"formulas[0].nodes", dag.CodeRequired, "has no nodes"}}},
		{"bad env name", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","env":{"1BAD":"v"}}]}`),
			[]want{{`formulas[0].nodes[0].env["1BAD"]`, dag.CodeValue, "not an environment variable name"}}},
		{"secret name with a slash", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","env":{"DB":{"secret":"db/pass"}}}]}`),
			[]want{{`formulas[0].nodes[0].env["DB"].secret`, dag.CodeValue, `"db/pass" is not a secret name`}}},
		{"secret name with dot-dot", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","env":{"DB":{"secret":"a..b"}}}]}`),
			[]want{{`formulas[0].nodes[0].env["DB"].secret`, dag.CodeValue, "without '..'"}}},
		{"secret name dot-dot alone", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","env":{"DB":{"secret":".."}}}]}`),
			[]want{{`formulas[0].nodes[0].env["DB"].secret`, dag.CodeValue, `".." is not a secret name`}}},
		{"secret name empty", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","env":{"DB":{"secret":""}}}]}`),
			[]want{{`formulas[0].nodes[0].env["DB"].secret`, dag.CodeRequired, "with a secret name"}}},
		{"secret misspelt", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","env":{"DB":{"secrte":"db"}}}]}`),
			[]want{{`formulas[0].nodes[0].env["DB"].secrte`, dag.CodeUnknownField, `did you mean "secret"?`}}},
		{"secret not a string", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","env":{"DB":{"secret":5}}}]}`),
			[]want{{`formulas[0].nodes[0].env["DB"].secret`, dag.CodeType, "expected a string"}}},
		{"env value a list", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x","env":{"DB":["x"]}}]}`),
			[]want{{`formulas[0].nodes[0].env["DB"]`, dag.CodeType, "or {secret: NAME}, got list"}}},
		{"gate env bad name", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x"}],"health_gate":{"check":"true","timeout":"10s","retries":3,"env":{"A-B":"v"}}}`),
			[]want{{`formulas[0].health_gate.env["A-B"]`, dag.CodeValue, "not an environment variable name"}}},
		{"gate secret bad name", base(`{"id":"a","server":"h1","nodes":[{"name":"n","run":"x"}],"health_gate":{"check":"true","timeout":"10s","retries":3,"env":{"T":{"secret":"../token"}}}}`),
			[]want{{`formulas[0].health_gate.env["T"].secret`, dag.CodeValue, `"../token" is not a secret name`}}},
		{"unknown field with hint", base(`{"id":"a","server":"h1","nodes":[{"name":"n","rnu":"x"}]}`),
			[]want{{"formulas[0].nodes[0].rnu", dag.CodeUnknownField, `unknown field "rnu" (did you mean "run"?)`}}},
		{"unknown top-level field", strings.Replace(base(okFormula), `"name":"t"`, `"name":"t","colour":"red"`, 1),
			[]want{{"colour", dag.CodeUnknownField, `unknown field "colour"`}}},
		{"wrong type", base(`{"id":"a","server":"h1","nodes":{"name":"n"}}`),
			[]want{{"formulas[0].nodes", dag.CodeType, "expected a list, got mapping"}}},
		{"duplicate key", `{"name":"t","name":"u"}`,
			[]want{{"name", dag.CodeDuplicateKey, `key "name" given twice`}}},
		{"syntax error", `{"name":"t",}`, []want{{"", dag.CodeSyntax, "invalid JSON"}}},
		{"trailing data", base(okFormula) + `{}`, []want{{"", dag.CodeSyntax, "unexpected data after"}}},
		{"truncated", `{"name":"t","hosts":{`, []want{{"*", dag.CodeSyntax, "unexpected end"}}},
		{"not an object", `[1,2]`, []want{{"", dag.CodeType, "expected a mapping, got list"}}},
		{"too deep", strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100), []want{{"*", dag.CodeTooDeep, "deeper than 64"}}},
		{"too large", `{"name":"` + strings.Repeat("x", dag.DefaultMaxBytes) + `"}`, []want{{"", dag.CodeTooLarge, "over the 1048576-byte limit"}}},
	}
}

func TestValidationErrors(t *testing.T) {
	for _, tc := range validationCases() {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, tc.doc)
			if err == nil {
				t.Fatalf("accepted an invalid composition: %+v", c)
			}
			if c != nil {
				t.Errorf("returned a composition along with the error")
			}
			got := problemsOf(t, err)
			for _, w := range tc.want {
				found := false
				for _, p := range got {
					if (w.path == "*" || p.Path == w.path) && p.Code == w.code && strings.Contains(p.Message, w.msg) {
						found = true
					}
				}
				if !found {
					t.Errorf("missing problem %s [%s] %q; got:\n%s", w.path, w.code, w.msg, fmtProblems(got))
				}
			}
		})
	}
}

func fmtProblems(ps []dag.Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s [%s]\n", p, p.Code)
	}
	return b.String()
}

// Every problem is reported at once, each once.
func TestAllProblemsAtOnce(t *testing.T) {
	doc := `{"name":"Bad","operation":"zap","hosts":{"h1":{"transport":"local"}},"formulas":[
		{"id":"a","server":"h9","depends_on":["zz"],"nodes":[{"name":"n"}]},
		{"id":"a","server":"h1","nodes":[{"name":"x.y","run":"x","timeout":"soon"}]}]}`
	_, err := load(t, doc)
	got := problemsOf(t, err)
	wantPaths := []string{"name", "operation", "formulas[0].server", "formulas[0].depends_on[0]", "formulas[1].id", "formulas[1].nodes[0].name", "formulas[1].nodes[0].timeout"}
	seen := map[string]int{}
	for _, p := range got {
		seen[p.Path]++
	}
	for _, w := range wantPaths {
		if seen[w] != 1 {
			t.Errorf("path %s reported %d times, want 1; all:\n%s", w, seen[w], fmtProblems(got))
		}
	}
	for _, p := range got {
		if p.Line == 0 {
			t.Errorf("problem without a line: %s", p)
		}
	}
}

// A type error is not reported a second time as "missing".
func TestTypeErrorNotAlsoMissing(t *testing.T) {
	_, err := load(t, base(`{"id":"a","server":7,"nodes":[{"name":"n","run":"x"}]}`))
	got := problemsOf(t, err)
	if len(got) != 1 || got[0].Code != dag.CodeType {
		t.Fatalf("want one type problem, got:\n%s", fmtProblems(got))
	}
}

func TestValidCompositionDefaults(t *testing.T) {
	c, err := load(t, base(`{"id":"a","server":"h1","nodes":[{"name":"n1","run":"x"},{"name":"n2","run":"y","env":{"PORT":8080,"DEBUG":true}}],"health_gate":{"check":"true","timeout":"5s","retries":2}},
		{"id":"b","server":"h2","max_parallel":4,"depends_on":["a"],"nodes":[{"name":"n1","run":"x"},{"name":"n2","run":"y"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Operation != dag.OpCreate || c.OnFailure != dag.OnFailureStop || c.Retry.MaxAttempts != 1 {
		t.Errorf("defaults: op=%s on_failure=%s retry=%+v", c.Operation, c.OnFailure, c.Retry)
	}
	if h := c.Hosts["h1"]; h.Transport != dag.TransportSSH || h.Address != "10.0.0.1:22" {
		t.Errorf("host h1 = %+v", h)
	}
	a, b := c.Formulas[0], c.Formulas[1]
	if got := a.Nodes[1].DependsOn; len(got) != 1 || got[0] != "n1" {
		t.Errorf("max_parallel 1 default deps of n2 = %v, want [n1]", got)
	}
	if got := b.Nodes[1].DependsOn; len(got) != 0 {
		t.Errorf("max_parallel 4 default deps of n2 = %v, want none", got)
	}
	if b.DependsOn[0].Condition != dag.ConditionHealthy {
		t.Errorf("dependency on a gated formula defaults to %q, want healthy", b.DependsOn[0].Condition)
	}
	if a.Nodes[0].Timeout.D() != dag.DefaultNodeTimeout {
		t.Errorf("default timeout %s", a.Nodes[0].Timeout)
	}
	if a.Nodes[1].Env["PORT"] != dag.Text("8080") || a.Nodes[1].Env["DEBUG"] != dag.Text("true") {
		t.Errorf("env scalars = %v", a.Nodes[1].Env)
	}
	// Normalizing twice changes nothing.
	before := fmt.Sprintf("%+v", *c)
	dag.Normalize(c)
	if after := fmt.Sprintf("%+v", *c); after != before {
		t.Errorf("Normalize is not idempotent:\n%s\n%s", before, after)
	}
}

func TestIsToken(t *testing.T) {
	for s, want := range map[string]bool{
		"a": true, "cp-0": true, "a_b": true, "0": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "_a": false, "A": false, "a.b": false, "a b": false, "a*": false, "a>": false,
		"é": false, strings.Repeat("a", 64): false, "a/b": false,
	} {
		if got := dag.IsToken(s); got != want {
			t.Errorf("IsToken(%q) = %v, want %v", s, got, want)
		}
	}
}

// A composition's and a formula's timeout are read as durations (a
// group formula's instances each have it), and left out they are none:
// nothing fills them in.
func TestTimeoutsOfCompositionAndFormula(t *testing.T) {
	c, err := load(t, `{"name":"t","timeout":"1h30m","hosts":{"h1":{"address":"10.0.0.1","labels":{"role":"web"}},"h2":{"address":"10.0.0.2","labels":{"role":"web"}}},
		"groups":{"web":{"labels":{"role":"web"}}},
		"formulas":[{"id":"a","server":"h1","timeout":"90s","nodes":[{"name":"n","run":"x"}]},
			{"id":"b","group":"web","timeout":"5m","nodes":[{"name":"n","run":"x"}]},
			{"id":"c","server":"h2","nodes":[{"name":"n","run":"x"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Timeout.D() != 90*time.Minute {
		t.Errorf("composition timeout %s, want 1h30m0s", c.Timeout)
	}
	got := map[string]time.Duration{}
	for _, f := range c.Formulas {
		got[f.ID] = f.Timeout.D()
	}
	want := map[string]time.Duration{"a": 90 * time.Second, "b-h1": 5 * time.Minute, "b-h2": 5 * time.Minute, "c": 0}
	if !maps.Equal(got, want) {
		t.Errorf("formula timeouts %v, want %v", got, want)
	}
	b, _ := json.Marshal(c)
	if !strings.Contains(string(b), `"timeout":"1h30m0s"`) || strings.Count(string(b), `"timeout":"5m0s"`) != 2 {
		t.Errorf("the normalized composition does not keep its timeouts: %s", b)
	}
}

// TestHostBecomeAndIdentity: a host's become, become_user and
// identity_file are read (an inventory's ansible_become,
// ansible_become_user and ansible_ssh_private_key_file become them).
func TestHostBecomeAndIdentity(t *testing.T) {
	c, err := load(t, `{"name":"t","hosts":{"h1":{"address":"10.0.0.1","become":true,"become_user":"app","identity_file":"~/.ssh/fleet_ed25519"}},
		"formulas":[`+okFormula+`]}`)
	if err != nil {
		t.Fatal(err)
	}
	want := dag.Host{Address: "10.0.0.1:22", Transport: dag.TransportSSH, Become: true, BecomeUser: "app", IdentityFile: "~/.ssh/fleet_ed25519"}
	if h := c.Hosts["h1"]; fmt.Sprintf("%+v", h) != fmt.Sprintf("%+v", want) {
		t.Errorf("host h1 = %+v, want %+v", h, want)
	}
	_, err = load(t, `{"name":"t","hosts":{"h1":{"address":"10.0.0.1","become":"yes"}},"formulas":[`+okFormula+`]}`)
	if got := problemsOf(t, err); len(got) != 1 || got[0].Path != "hosts.h1.become" || got[0].Code != dag.CodeType {
		t.Errorf("become \"yes\": %s", fmtProblems(got))
	}
}

// An ssh host without an address is reached at its name, as an
// inventory's host without ansible_host: the contract's
// `10.0.0.5: {user: deploy, become: true, identity_file: ...}`. A local
// host has none.
func TestHostWithoutAddressIsReachedAtItsName(t *testing.T) {
	c, err := load(t, `{"name":"t","hosts":{"10.0.0.5":{"user":"deploy","become":true,"identity_file":"~/.ssh/fleet_ed25519"},
		"web-1.example.com":{"transport":"ssh"},"h1":{"transport":"local"}},
		"formulas":[`+okFormula+`]}`)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"10.0.0.5": "10.0.0.5:22", "web-1.example.com": "web-1.example.com:22", "h1": ""} {
		if got := c.Hosts[name].Address; got != want {
			t.Errorf("host %s: address %q, want %q", name, got, want)
		}
	}
}
