package events_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

func TestGraphOf(t *testing.T) {
	doc := `{"name":"g","hosts":{"h1":{"transport":"local","labels":{"role":"web"}},"h2":{"transport":"local","labels":{"role":"web"}},"db":{"transport":"local"}},
	"groups":{"web":{"labels":{"role":"web"}}},
	"formulas":[{"id":"base","server":"db","nodes":[{"name":"a","run":"echo SECRET-CMD"},{"name":"b","run":"true","env":{"K":"v"}}]},
	{"id":"app","group":"web","rollout":{"batch":1},"depends_on":["base"],"nodes":[{"name":"n","run":"true"}],"health_gate":{"check":"true","timeout":"5s","retries":1}}]}`
	c, err := dag.ParseJSONComposition([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	g := events.GraphOf(dag.PlanLoaded(c))
	if g == nil || len(g.Formulas) != 3 {
		t.Fatalf("graph %+v, want 3 formulas", g)
	}
	base := g.Formulas[0]
	if base.ID != "base" || base.Host != "db" || len(base.Nodes) != 2 || base.Nodes[1].Name != "b" || len(base.Nodes[1].DependsOn) != 1 || base.Nodes[1].DependsOn[0] != "a" {
		t.Errorf("base = %+v", base)
	}
	var inst []events.GraphFormula
	for _, f := range g.Formulas[1:] {
		if f.Of != "app" || f.Batches != 2 || !f.Gate || f.ID != "app-"+f.Host {
			t.Errorf("instance %+v: want of app, 2 batches, gated, id app-<host>", f)
		}
		inst = append(inst, f)
	}
	if inst[0].Batch == inst[1].Batch {
		t.Errorf("instances in the same batch: %+v", inst)
	}
	b, _ := json.Marshal(g)
	for _, leak := range []string{"SECRET-CMD", `"K"`, "transport"} {
		if strings.Contains(string(b), leak) {
			t.Errorf("graph carries %s: %s", leak, b)
		}
	}
}

func TestGraphOfTooLarge(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"name":"big","hosts":{"h":{"transport":"local"}},"formulas":[`)
	for i := range 2000 {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"id":"f-` + strings.Repeat("x", 50) + itoa(i) + `","server":"h","nodes":[`)
		for j := range 5 {
			if j > 0 {
				sb.WriteString(",")
			}
			sb.WriteString(`{"name":"n-` + strings.Repeat("y", 50) + itoa(j) + `","run":"true"}`)
		}
		sb.WriteString("]}")
	}
	sb.WriteString("]}")
	c, err := dag.ParseJSONComposition([]byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	if g := events.GraphOf(dag.PlanLoaded(c)); g != nil {
		t.Fatalf("a graph over %d bytes was kept", events.MaxGraphBytes)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
