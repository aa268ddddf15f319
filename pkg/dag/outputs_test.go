package dag_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// outputsDoc is a composition over hosts h1-h3 (h1, h2 in group web) with
// the formulas given.
func outputsDoc(formulas string) string {
	return `{"name":"t","hosts":{"h1":{"address":"10.0.0.1","labels":{"role":"web"}},"h2":{"address":"10.0.0.2","labels":{"role":"web"}},"h3":{"address":"10.0.0.3"}},
	"groups":{"web":{"labels":{"role":"web"}}},"formulas":[` + formulas + `]}`
}

const cpFormula = `{"id":"cp","server":"h3","nodes":[{"name":"init","run":"kubeadm init","outputs":["join_cmd",{"name":"token","secret":true}]}]}`

func TestOutputValidation(t *testing.T) {
	type want struct{ path, msg string }
	cases := []struct {
		name string
		doc  string
		want []want
	}{
		{"unknown output name", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ output \"cp/init\" \"join_command\" }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", `node cp/init does not declare output "join_command" (it declares join_cmd, token)`}}},
		{"unknown formula", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"x","env":{"J":"{{ output \"cq/init\" \"join_cmd\" }}"}}]}`),
			[]want{{`formulas[1].nodes[0].env["J"]`, `unknown formula "cq"`}}},
		{"unknown node", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"x","check":"{{ output \"cp/inti\" \"join_cmd\" }}"}]}`),
			[]want{{"formulas[1].nodes[0].check", `formula "cp" has no node "inti"`}}},
		{"producer declares none", outputsDoc(`{"id":"cp","server":"h3","nodes":[{"name":"init","run":"x"}]},{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ output \"cp/init\" \"x\" }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", "it declares none: add outputs: [NAME] to it"}}},
		{"not formula/node", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ output \"cp\" \"join_cmd\" }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", `name the producing node as "formula/node"`}}},
		{"words not quoted", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ output .Host \"join_cmd\" }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", "output takes two or three quoted words"}}},
		{"unknown name in a chain", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ (output \"cp/init\" \"nope\").X }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", `does not declare output "nope"`}}},
		{"output decides an if", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ if output \"cp/init\" \"join_cmd\" }}x{{ end }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", "cannot decide an if"}}},
		{"compared", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ $j := output \"cp/init\" \"join_cmd\" }}{{ if eq $j \"x\" }}y{{ end }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", "a comparison or index of an output"}}},
		{"printf of an output", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ printf \"%q\" (output \"cp/init\" \"join_cmd\") }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", "printf of an output"}}},
		{"a marker of an undeclared output", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"echo ⟦output:cp/init/join⟧"}]}`),
			[]want{{"formulas[1].nodes[0].run", `node cp/init does not declare output "join"`}}},
		{"a marker not closed", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"echo ⟦output:cp/init/join_cmd"}]}`),
			[]want{{"formulas[1].nodes[0].run", `is not closed`}}},
		{"a marker that lies about a secret", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"echo ⟦output:cp/init/token⟧"}]}`),
			[]want{{"formulas[1].nodes[0].run", `the marker says secret false, the output is declared secret true`}}},
		{"printf cuts a marker", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ print (output \"cp/init\" \"join_cmd\") | html }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", `html of an output`}}},
		{"secret quoted twice", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ shq (shq (output \"cp/init\" \"token\")) }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", "quote it with shq once at most"}}},
		{"secret name from an output", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"x","env":{"T":{"secret":"{{ output \"cp/init\" \"token\" }}"}}}]}`),
			[]want{{`formulas[1].nodes[0].env["T"].secret`, "a secret's name cannot be an output"}}},
		{"an output in a file's template", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"conf","run":"true","files":[{"path":"/etc/app.conf","template":"tok={{ output \"cp/init\" \"join_cmd\" }}"}]}]}`),
			[]want{{"formulas[1].nodes[0].files[0].template", "a file cannot read an output"}}},
		{"an output in a file's path", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"conf","run":"true","files":[{"path":"/etc/{{ output \"cp/init\" \"join_cmd\" }}","content":"x"}]}]}`),
			[]want{{"formulas[1].nodes[0].files[0].path", "a file cannot read an output"}}},
		{"outputs on a node without run", outputsDoc(`{"id":"cp","server":"h3","nodes":[{"name":"init","outputs":["v"],"files":[{"path":"/etc/x","content":"x"}]}]}`),
			[]want{{"formulas[0].nodes[0].outputs", "a node without run declares outputs"}}},
		{"reads its own output", outputsDoc(`{"id":"cp","server":"h3","nodes":[{"name":"init","run":"echo {{ output \"cp/init\" \"a\" }}","outputs":["a"]}]}`),
			[]want{{"formulas[0].nodes[0].run", `node "init" reads its own output`}}},
		{"node cycle through an output", outputsDoc(`{"id":"cp","server":"h3","nodes":[
			{"name":"a","run":"echo {{ output \"cp/b\" \"x\" }}","outputs":["x"]},
			{"name":"b","run":"true","outputs":["x"]}]}`),
			[]want{{"formulas[0].nodes[0].depends_on", `dependency cycle between nodes of formula "cp": a -> b -> a (a node that reads another's output depends on it)`}}},
		{"formula cycle through outputs", outputsDoc(`{"id":"a","server":"h3","nodes":[{"name":"n","run":"echo {{ output \"b/n\" \"x\" }}","outputs":["x"]}]},
			{"id":"b","server":"h3","nodes":[{"name":"n","run":"echo {{ output \"a/n\" \"x\" }}","outputs":["x"]}]}`),
			[]want{{"formulas[0].depends_on", "dependency cycle between formulas: a -> b -> a (a formula that reads another's output depends on it)"}}},
		{"formula cycle through depends_on and an output", outputsDoc(`{"id":"a","server":"h3","depends_on":["b"],"nodes":[{"name":"n","run":"true","outputs":["x"]}]},
			{"id":"b","server":"h3","nodes":[{"name":"n","run":"echo {{ output \"a/n\" \"x\" }}"}]}`),
			[]want{{"formulas[0].depends_on", "dependency cycle between formulas: a -> b -> a"}}},
		{"bad output name", outputsDoc(`{"id":"cp","server":"h3","nodes":[{"name":"init","run":"x","outputs":["join-cmd"]}]}`),
			[]want{{"formulas[0].nodes[0].outputs[0].name", `"join-cmd" is not an output name`}}},
		{"output declared twice", outputsDoc(`{"id":"cp","server":"h3","nodes":[{"name":"init","run":"x","outputs":["a",{"name":"a","secret":true}]}]}`),
			[]want{{"formulas[0].nodes[0].outputs[1].name", `output "a" is declared twice`}}},
		{"output with no name", outputsDoc(`{"id":"cp","server":"h3","nodes":[{"name":"init","run":"x","outputs":[{"secret":true}]}]}`),
			[]want{{"formulas[0].nodes[0].outputs[0].name", "an output needs a name"}}},
		{"output of a wrong type", outputsDoc(`{"id":"cp","server":"h3","nodes":[{"name":"init","run":"x","outputs":[3]}]}`),
			[]want{{"formulas[0].nodes[0].outputs[0]", "expected an output name or {name: NAME, secret: true}"}}},
		{"unknown field in an output", outputsDoc(`{"id":"cp","server":"h3","nodes":[{"name":"init","run":"x","outputs":[{"name":"a","secret":true,"masked":true}]}]}`),
			[]want{{"formulas[0].nodes[0].outputs[0].masked", `unknown field "masked"`}}},
		{"group producer read from a host outside it", outputsDoc(`{"id":"app","group":"web","nodes":[{"name":"n","run":"x","outputs":["port"]}]},
			{"id":"lb","server":"h3","nodes":[{"name":"n","run":"echo {{ output \"app/n\" \"port\" }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", `host "h3" is not one of them: name the host to read`}}},
		{"group producer, host not in the group", outputsDoc(`{"id":"app","group":"web","nodes":[{"name":"n","run":"x","outputs":["port"]}]},
			{"id":"lb","server":"h3","nodes":[{"name":"n","run":"echo {{ output \"app/n\" \"port\" \"h3\" }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", `host "h3" is not a host of group "web"`}}},
		{"single-host producer, another host named", outputsDoc(cpFormula + `,{"id":"w","server":"h1","nodes":[{"name":"join","run":"{{ output \"cp/init\" \"join_cmd\" \"h1\" }}"}]}`),
			[]want{{"formulas[1].nodes[0].run", `formula "cp" runs on host "h3" only: drop the host`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.doc)
			if err == nil {
				t.Fatal("accepted, want rejected")
			}
			ps := problemsOf(t, err)
			for _, w := range tc.want {
				if !slices.ContainsFunc(ps, func(p dag.Problem) bool { return p.Path == w.path && strings.Contains(p.Message, w.msg) }) {
					t.Errorf("no problem at %s containing %q; got %v", w.path, w.msg, ps)
				}
			}
		})
	}
}

func TestOutputReadsRenderAndLink(t *testing.T) {
	c, err := load(t, outputsDoc(cpFormula+`,
		{"id":"w","group":"web","nodes":[
			{"name":"join","run":"{{ output \"cp/init\" \"join_cmd\" }} --token {{ shq (output \"cp/init\" \"token\") }}","env":{"J":"{{ output \"cp/init\" \"join_cmd\" }}"},"outputs":["node_name"]},
			{"name":"label","run":"true","max":0},
			{"name":"after","run":"echo {{ output \"w/join\" \"node_name\" }}"}]},
		{"id":"lb","server":"h3","nodes":[{"name":"n","run":"echo {{ output \"w/join\" \"node_name\" \"h2\" }}"}]}`))
	if err == nil {
		t.Fatal("a node with an unknown field was accepted")
	}
	c, err = load(t, outputsDoc(cpFormula+`,
		{"id":"w","group":"web","max_parallel":4,"nodes":[
			{"name":"join","run":"{{ output \"cp/init\" \"join_cmd\" }} --token {{ shq (output \"cp/init\" \"token\") }}","env":{"J":"{{ output \"cp/init\" \"join_cmd\" }}"},"outputs":["node_name"]},
			{"name":"after","run":"echo {{ output \"w/join\" \"node_name\" }}"}]},
		{"id":"lb","server":"h3","nodes":[{"name":"n","run":"echo {{ output \"w/join\" \"node_name\" \"h2\" }}"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]dag.Formula{}
	for _, f := range c.Formulas {
		byID[f.ID] = f
	}
	w1 := byID["w-h1"]
	if got, want := w1.Nodes[0].Run, "⟦output:cp/init/join_cmd⟧ --token '⟦output:cp/init/token:secret:q1⟧'"; got != want {
		t.Errorf("run rendered to %q, want %q", got, want)
	}
	if got := w1.Nodes[0].Env["J"].Text; got != "⟦output:cp/init/join_cmd⟧" {
		t.Errorf("env J rendered to %q", got)
	}
	if got := w1.Nodes[1].Run; got != "echo ⟦output:w-h1/join/node_name⟧" {
		t.Errorf("a read of its own instance rendered to %q", got)
	}
	if !slices.Contains(w1.Nodes[1].DependsOn, "join") {
		t.Errorf("node after does not depend on join, whose output it reads: %v", w1.Nodes[1].DependsOn)
	}
	if !slices.ContainsFunc(w1.DependsOn, func(d dag.FormulaDep) bool { return d.Formula == "cp" && d.Condition == dag.ConditionCompleted }) {
		t.Errorf("w-h1 does not depend on cp, whose output it reads: %v", w1.DependsOn)
	}
	lb := byID["lb"]
	if got := lb.Nodes[0].Run; got != "echo ⟦output:w-h2/join/node_name⟧" {
		t.Errorf("a read of a named instance rendered to %q", got)
	}
	for _, id := range []string{"w-h1", "w-h2"} {
		if !slices.ContainsFunc(lb.DependsOn, func(d dag.FormulaDep) bool { return d.Formula == id }) {
			t.Errorf("lb does not depend on %s: %v", id, lb.DependsOn)
		}
	}
	// A composition rendered already (one without groups: an instance is
	// not a field a composition may give) loads again the same: its
	// reads, markers now, are checked again.
	c, err = load(t, outputsDoc(cpFormula+`,
		{"id":"w","server":"h1","nodes":[
			{"name":"join","run":"{{ output \"cp/init\" \"join_cmd\" }} --token {{ shq (output \"cp/init\" \"token\") }}","outputs":["node_name"]},
			{"name":"after","run":"echo {{ output \"w/join\" \"node_name\" }}"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := dag.ParseJSONComposition(b)
	if err != nil {
		t.Fatalf("the rendered composition does not load again: %v", err)
	}
	b2, _ := json.Marshal(again)
	if string(b) != string(b2) {
		t.Errorf("loaded again, the composition changed:\n%s\n%s", b, b2)
	}
}

func TestOutputDeclarationsCountInTheSpecHash(t *testing.T) {
	n := dag.Node{Name: "init", Run: "x"}
	plain := dag.SpecHash(&n)
	n.Outputs = []dag.Output{{Name: "a"}}
	declared := dag.SpecHash(&n)
	n.Outputs[0].Secret = true
	secret := dag.SpecHash(&n)
	if plain == declared || declared == secret || plain == secret {
		t.Errorf("spec hashes %s, %s, %s: declaring an output (secret or not) must change it", plain, declared, secret)
	}
}

func TestReplaceOutputs(t *testing.T) {
	ref := dag.OutputRef{Formula: "cp", Node: "init", Name: "token", Secret: true, Quote: 1}
	got, err := dag.ReplaceOutputs("a "+ref.Marker()+" b", func(r dag.OutputRef) (string, error) {
		if r != ref {
			t.Errorf("parsed %+v, want %+v", r, ref)
		}
		return "V", nil
	})
	if err != nil || got != "a V b" {
		t.Errorf("got %q, %v", got, err)
	}
	for _, bad := range []string{"⟦output:cp/init/x", "⟦output:cp/init⟧", "⟦output:cp/init/x:q0⟧", "⟦output:cp/init/x:what⟧", "⟦output:Cp/init/x⟧"} {
		if _, err := dag.ReplaceOutputs(bad, func(dag.OutputRef) (string, error) { return "", nil }); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
