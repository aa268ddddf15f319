package dag_test

import (
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// fleet is a composition with three labelled hosts and the given extra
// top-level fields (JSON members, with a trailing comma).
func fleet(extra, hostExtra string) string {
	return `{"name":"t",` + extra + `"groups":{"web":{"labels":{"role":"web"}},"pair":{"hosts":["w1","w2"]}},
	"hosts":{"w1":{"address":"10.0.0.1","labels":{"role":"web","provider":"hetzner","zone":"eu-1"}` + hostExtra + `},
	"w2":{"address":"10.0.0.2","labels":{"role":"web","provider":"hetzner","zone":"eu-2"}},
	"w3":{"address":"10.0.0.3","labels":{"role":"db","provider":"aws"}}},
	"formulas":[{"id":"a","server":"w1","nodes":[{"name":"n","run":"true"}]}]}`
}

func TestLimitValidation(t *testing.T) {
	for _, tc := range []struct {
		name, doc, path, msg string
	}{
		{"host max_parallel too big", fleet(``, `,"max_parallel":2000`), "hosts.w1.max_parallel", "out of range 1-1024"},
		{"host max_parallel negative", fleet(``, `,"max_parallel":-1`), "hosts.w1.max_parallel", "out of range"},
		{"limit max_parallel 0", fleet(`"limits":[{"labels":{"provider":"hetzner"},"max_parallel":0}],`, ``), "limits[0].max_parallel", "out of range"},
		{"limit both", fleet(`"limits":[{"labels":{"provider":"hetzner"},"group":"web","max_parallel":2}],`, ``), "limits[0]", "not both"},
		{"limit neither", fleet(`"limits":[{"max_parallel":2}],`, ``), "limits[0]", "needs labels"},
		{"limit unknown group", fleet(`"limits":[{"group":"ghost","max_parallel":2}],`, ``), "limits[0].group", `unknown group "ghost"`},
		{"priority out of range", fleet(`"priority":101,`, ``), "priority", "out of range 1-100"},
		{"priority 0", fleet(`"priority":0,`, ``), "priority", "leave it out"},
		{"zone not a token", strings.Replace(fleet(``, ``), `"zone":"eu-1"`, `"zone":"EU 1"`, 1), "hosts.w1.labels.zone", "zone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.doc)
			if err == nil {
				t.Fatal("accepted")
			}
			ps := problemsOf(t, err)
			for _, p := range ps {
				if p.Path == tc.path && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Errorf("want %s: %q, got %v", tc.path, tc.msg, ps)
		})
	}
	ok := fleet(`"priority":90,"limits":[{"labels":{"provider":"hetzner"},"max_parallel":10},{"group":"web","max_parallel":2}],`, `,"max_parallel":1`)
	if _, err := load(t, ok); err != nil {
		t.Fatalf("valid fleet rejected: %v", err)
	}
}

func TestHostLimits(t *testing.T) {
	c, err := load(t, fleet(`"limits":[{"labels":{"provider":"hetzner"},"max_parallel":10},{"group":"web","max_parallel":2},{"labels":{"role":"web"},"max_parallel":3},{"group":"pair","max_parallel":1}],`, `,"max_parallel":1`))
	if err != nil {
		t.Fatal(err)
	}
	names := func(ls []dag.SlotLimit) map[string]int {
		m := map[string]int{}
		for _, l := range ls {
			m[l.Name] = l.MaxParallel
		}
		return m
	}
	w1 := c.HostLimits("w1")
	// group web is the labels role=web: one limit, the smaller max holds.
	want := map[string]int{"host w1": 1, "provider=hetzner": 10, "group web (role=web)": 2, "group pair": 1}
	if got := names(w1); len(got) != len(want) {
		t.Fatalf("w1 limits %v, want %v", got, want)
	}
	for k, v := range want {
		if names(w1)[k] != v {
			t.Errorf("w1 limit %q = %d, want %d (all: %v)", k, names(w1)[k], v, w1)
		}
	}
	for i := 1; i < len(w1); i++ {
		if w1[i-1].ID >= w1[i].ID {
			t.Errorf("limits not in ID order: %v", w1)
		}
	}
	if got := names(c.HostLimits("w3")); len(got) != 1 || got["host w3"] != 0 {
		t.Errorf("w3 limits %v, want only its host's (0: the executor's --per-host)", got)
	}
	// The same labels in another composition are the same limit.
	c2, _ := load(t, strings.Replace(fleet(`"limits":[{"labels":{"provider":"hetzner"},"max_parallel":4}],`, ``), `"name":"t"`, `"name":"other"`, 1))
	id := func(ls []dag.SlotLimit, name string) string {
		for _, l := range ls {
			if l.Name == name {
				return l.ID
			}
		}
		return ""
	}
	if a, b := id(w1, "provider=hetzner"), id(c2.HostLimits("w2"), "provider=hetzner"); a == "" || a != b {
		t.Errorf("provider=hetzner has IDs %q and %q", a, b)
	}
	if c.EffectivePriority() != dag.DefaultPriority {
		t.Errorf("default priority %d", c.EffectivePriority())
	}
	if c.Hosts["w2"].Zone() != "eu-2" || c.Hosts["w3"].Zone() != "" {
		t.Error("zones")
	}
}
