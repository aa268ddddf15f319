package dag_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

const fleetDoc = `{"name":"fleet","vars":{"domain":"example.com","port":"80"},
 "hosts":{
  "bastion":{"address":"203.0.113.5:22","user":"ops"},
  "web-1":{"address":"10.0.0.11","labels":{"role":"web","zone":"eu-1"},"vars":{"port":8081}},
  "web-2":{"address":"10.0.0.12","labels":{"role":"web","zone":"eu-1"},"vars":{"port":8082}},
  "web-3":{"address":"10.0.0.13","labels":{"role":"web","zone":"eu-2"},"vars":{"port":8083}}},
 "groups":{"web":{"labels":{"role":"web"}},"eu1":{"hosts":["web-2","web-1"]}},
 "formulas":[
  {"id":"base","server":"bastion","nodes":[{"name":"n","run":"echo {{ .Host }} {{ .Vars.domain }} {{ .Vars.port }}"}]},
  {"id":"app","group":"web","depends_on":["base"],"rollout":{"batch":1,"max_failed":0},
   "nodes":[{"name":"conf","run":"echo port={{ .Vars.port }} host={{ .Host }} at {{ .Address }} zone={{ .Labels.zone }} > /etc/app.conf",
             "env":{"GREETING":"hi {{ .Host }}","PASS":{"secret":"db_pass"},"HOST_KEY":{"secret":"key_{{ .Host }}"}}},
            {"name":"say","run":"echo {{ shq .Vars.msg }}"}],
   "health_gate":{"check":"curl -fsS localhost:{{ .Vars.port }}/health","timeout":"60s","retries":6}},
  {"id":"lb","server":"bastion","depends_on":["app"],"nodes":[{"name":"reload","run":"true"}]},
  {"id":"eu","group":"eu1","rollout":{"batch":"50%","max_failed":"50%"},"nodes":[{"name":"x","run":"true"}]}]}`

func loadFleet(t *testing.T, doc string) *dag.Composition {
	t.Helper()
	c, err := dag.ParseJSONComposition([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func formula(c *dag.Composition, id string) *dag.Formula {
	for i := range c.Formulas {
		if c.Formulas[i].ID == id {
			return &c.Formulas[i]
		}
	}
	return nil
}

// A group formula becomes one instance per host, each with its commands
// rendered for its host; rollouts chain the batches; dependencies on the
// group formula wait for every instance.
func TestFanOut(t *testing.T) {
	doc := strings.Replace(fleetDoc, `"vars":{"port":8083}`, `"vars":{"port":8083,"msg":"it's here"}`, 1)
	doc = strings.Replace(doc, `"vars":{"port":8081}`, `"vars":{"port":8081,"msg":"a"}`, 1)
	doc = strings.Replace(doc, `"vars":{"port":8082}`, `"vars":{"port":8082,"msg":"b"}`, 1)
	c := loadFleet(t, doc)
	var ids []string
	for _, f := range c.Formulas {
		ids = append(ids, f.ID)
	}
	want := []string{"base", "app-web-1", "app-web-2", "app-web-3", "lb", "eu-web-1", "eu-web-2"}
	if !slices.Equal(ids, want) {
		t.Fatalf("formulas %q, want %q", ids, want)
	}
	if got := formula(c, "base").Nodes[0].Run; got != "echo bastion example.com 80" {
		t.Errorf("base run %q", got)
	}
	a3 := formula(c, "app-web-3")
	if got := a3.Nodes[0].Run; got != "echo port=8083 host=web-3 at 10.0.0.13:22 zone=eu-2 > /etc/app.conf" {
		t.Errorf("app-web-3 run %q", got)
	}
	if got := a3.Nodes[1].Run; got != `echo 'it'\''s here'` {
		t.Errorf("shq: %q", got)
	}
	if a3.Nodes[0].Env["GREETING"] != dag.Text("hi web-3") || a3.Nodes[0].Env["PASS"] != dag.SecretRef("db_pass") || a3.Nodes[0].Env["HOST_KEY"] != dag.SecretRef("key_web-3") {
		t.Errorf("env %v", a3.Nodes[0].Env)
	}
	if formula(c, "app-web-1").Nodes[0].Env["GREETING"] != dag.Text("hi web-1") {
		t.Errorf("instances share their env map")
	}
	if got := a3.HealthGate.Check; got != "curl -fsS localhost:8083/health" {
		t.Errorf("gate %q", got)
	}
	if a3.Server != "web-3" || a3.Group != "" || a3.Instance == nil || *a3.Instance != (dag.Instance{Of: "app", Batch: 3, Batches: 3}) {
		t.Errorf("app-web-3 = server %q group %q instance %+v", a3.Server, a3.Group, a3.Instance)
	}
	deps := func(id string) []string {
		var out []string
		for _, d := range formula(c, id).DependsOn {
			out = append(out, d.Formula+":"+string(d.Condition))
		}
		return out
	}
	for id, want := range map[string][]string{
		"app-web-1": {"base:completed"},
		"app-web-2": {"base:completed", "app-web-1:rollout"},
		"app-web-3": {"base:completed", "app-web-2:rollout"},
		"lb":        {"app-web-1:healthy", "app-web-2:healthy", "app-web-3:healthy"},
		"eu-web-2":  {"eu-web-1:rollout"},
	} {
		if got := deps(id); !slices.Equal(got, want) {
			t.Errorf("%s depends on %q, want %q", id, got, want)
		}
	}
	if e := formula(c, "eu-web-2").Instance; *e != (dag.Instance{Of: "eu", Batch: 2, Batches: 2, MaxFailed: 1}) {
		t.Errorf("eu-web-2 instance %+v", e)
	}
	// The plan holds the rendered commands; the spec hash covers them.
	p, err := dag.NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	i1, _ := p.Index("app-web-1")
	i2, _ := p.Index("app-web-2")
	if p.Formulas[i1].Nodes[0].SpecHash == p.Formulas[i2].Nodes[0].SpecHash {
		t.Errorf("instances with other rendered commands have one spec hash")
	}
}

// targets may name a group formula (every instance) or one instance.
func TestFanOutTargets(t *testing.T) {
	doc := strings.Replace(fleetDoc, `{"name":"fleet",`, `{"name":"fleet","targets":["app"],`, 1)
	doc = strings.ReplaceAll(doc, " {{ shq .Vars.msg }}", "")
	c := loadFleet(t, doc)
	if !slices.Equal(c.Targets, []string{"app-web-1", "app-web-2", "app-web-3"}) {
		t.Errorf("targets %q", c.Targets)
	}
	// One instance, as reconcile names them from drift.
	one := strings.Replace(doc, `"targets":["app"]`, `"targets":["app-web-2"]`, 1)
	c = loadFleet(t, one)
	p := dag.PlanLoaded(c)
	if _, ok := p.Index("app-web-2"); !ok || len(p.NotSelected) == 0 {
		t.Errorf("targets app-web-2: plan %v, not selected %v", p.LevelIDs, p.NotSelected)
	}
	if _, err := dag.ParseJSONComposition([]byte(strings.Replace(doc, `"targets":["app"]`, `"targets":["app-web-9"]`, 1))); err == nil {
		t.Errorf("a target naming no instance was accepted")
	}
}

func TestFleetProblems(t *testing.T) {
	base := strings.ReplaceAll(fleetDoc, " {{ shq .Vars.msg }}", "")
	cases := []struct {
		name, from, to string
		path           string
		code           dag.Code
		msg            string
	}{
		{"missing var", "{{ .Vars.port }}/health", "{{ .Vars.nope }}/health", "formulas[1].health_gate.check", dag.CodeTemplate, `var "nope" is not set (in vars:, a host's or group's vars, an inventory, --var or --var-file) (for host web-1)`},
		{"bad template", "echo port={{ .Vars.port }}", "echo port={{ .Vars.port ", "formulas[1].nodes[0].run", dag.CodeTemplate, "template:"},
		{"unknown field", "{{ .Host }} {{ .Vars.domain }}", "{{ .Hots }}", "formulas[0].nodes[0].run", dag.CodeTemplate, "can't evaluate field Hots"},
		{"templated secret name renders to a path", `"PASS":{"secret":"db_pass"}`, `"PASS":{"secret":"{{ .Vars.domain }}/x"}`, `formulas[1].nodes[0].env["PASS"].secret`, dag.CodeValue, `"example.com/x" is not a secret name`},
		{"range over a number", "echo {{ .Host }} {{ .Vars.domain }}", "{{ range 1000000000 }}x{{ end }}", "formulas[0].nodes[0].run", dag.CodeTemplate, "range over a number is not allowed"},
		{"renders too much", "echo {{ .Host }} {{ .Vars.domain }}", `{{ range .Vars }}{{ printf \"%900000s\" . }}{{ end }}`, "formulas[0].nodes[0].run", dag.CodeTemplate, "printf makes more than 262144 bytes"},
		{"unknown group", `"group":"web","depends_on"`, `"group":"webb","depends_on"`, "formulas[1].group", dag.CodeUnknownRef, `group "webb" is not listed in groups`},
		{"server and group", `"id":"app","group":"web"`, `"id":"app","server":"bastion","group":"web"`, "formulas[1].group", dag.CodeValue, "not both"},
		{"rollout without group", `"id":"lb","server":"bastion",`, `"id":"lb","server":"bastion","rollout":{"batch":1},`, "formulas[2].rollout", dag.CodeValue, "rollout needs group"},
		{"batch zero", `"rollout":{"batch":1,"max_failed":0}`, `"rollout":{"batch":0}`, "formulas[1].rollout.batch", dag.CodeValue, "at least 1"},
		{"batch percent", `"rollout":{"batch":1,"max_failed":0}`, `"rollout":{"batch":"150%"}`, "formulas[1].rollout.batch", dag.CodeValue, "1%-100%"},
		{"batch text", `"rollout":{"batch":1,"max_failed":0}`, `"rollout":{"batch":"half"}`, "formulas[1].rollout.batch", dag.CodeType, `got "half"`},
		{"group host unknown", `"hosts":["web-2","web-1"]`, `"hosts":["web-2","web-9"]`, "groups.eu1.hosts[1]", dag.CodeUnknownRef, `host "web-9" is not listed`},
		{"group matches nothing", `"web":{"labels":{"role":"web"}}`, `"web":{"labels":{"role":"db"}}`, "groups.web.labels", dag.CodeValue, "no host has the labels role=db"},
		{"group both", `"web":{"labels":{"role":"web"}}`, `"web":{"labels":{"role":"web"},"hosts":["web-1"]}`, "groups.web", dag.CodeValue, "not both"},
		{"instance clash", `{"id":"base","server":"bastion"`, `{"id":"app-web-1","server":"bastion","nodes":[{"name":"n","run":"x"}]},{"id":"base","server":"bastion"`, "*", dag.CodeDuplicate, `formula id "app-web-1" is made twice`},
		{"user rollout condition", `"id":"lb","server":"bastion","depends_on":["app"]`, `"id":"lb","server":"bastion","depends_on":[{"formula":"base","condition":"rollout"}]`, "formulas[2].depends_on[0].condition", dag.CodeValue, `unknown condition "rollout"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(base, tc.from, tc.to, 1)
			if doc == base {
				t.Fatalf("%q not in the document", tc.from)
			}
			_, err := dag.ParseJSONComposition([]byte(doc))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, p := range problemsOf(t, err) {
				if (tc.path == "*" || p.Path == tc.path) && p.Code == tc.code && strings.Contains(p.Message, tc.msg) {
					if p.Line == 0 {
						t.Errorf("problem without a line: %s", p)
					}
					return
				}
			}
			t.Errorf("no %s problem %q at %s in:\n%s", tc.code, tc.msg, tc.path, fmtProblems(problemsOf(t, err)))
		})
	}
}

// A small document that fans out into more nodes than a run can hold is
// refused before anything is made.
func TestFanOutBounded(t *testing.T) {
	var hosts, formulas []string
	for i := range 500 {
		hosts = append(hosts, fmt.Sprintf(`"h%d":{"transport":"local","labels":{"r":"x"}}`, i))
	}
	for i := range 500 {
		formulas = append(formulas, fmt.Sprintf(`{"id":"f%d","group":"g","nodes":[{"name":"n","run":"x"}]}`, i))
	}
	doc := `{"name":"big","hosts":{` + strings.Join(hosts, ",") + `},"groups":{"g":{"labels":{"r":"x"}}},"formulas":[` + strings.Join(formulas, ",") + `]}`
	_, err := dag.ParseJSONComposition([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "fan out into 250000 nodes, more than 200000") {
		t.Fatalf("error %v", err)
	}
}

// rerun may name a group formula's node (every instance's) or one
// instance's; a reference to no instance is refused with its path.
func TestFanOutRerun(t *testing.T) {
	doc := strings.Replace(fleetDoc, `{"name":"fleet",`, `{"name":"fleet","rerun":["app/conf","eu-web-2/x","base/n"],`, 1)
	doc = strings.ReplaceAll(doc, " {{ shq .Vars.msg }}", "")
	c := loadFleet(t, doc)
	want := []string{"app-web-1/conf", "app-web-2/conf", "app-web-3/conf", "eu-web-2/x", "base/n"}
	if !slices.Equal(c.Rerun, want) {
		t.Errorf("rerun %q, want %q", c.Rerun, want)
	}
	_, err := dag.ParseJSONComposition([]byte(strings.Replace(doc, `"eu-web-2/x"`, `"eu-web-3/x"`, 1)))
	if err == nil || !strings.Contains(err.Error(), `rerun "eu-web-3/x": no formula (or instance of a group formula) "eu-web-3"`) {
		t.Errorf("a rerun naming no instance: %v", err)
	}
}
