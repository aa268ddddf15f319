package dag_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

func rolloutPlan(t *testing.T, hosts int, rollout string, onFailure dag.OnFailure, gated bool) *dag.Plan {
	t.Helper()
	doc := `{"name":"r","on_failure":"` + string(onFailure) + `","hosts":{`
	for i := 1; i <= hosts; i++ {
		if i > 1 {
			doc += ","
		}
		doc += fmt.Sprintf(`"h%d":{"transport":"local","labels":{"role":"web"}}`, i)
	}
	gate := ""
	if gated {
		gate = `,"health_gate":{"check":"true","timeout":"10s","retries":1}`
	}
	doc += `},"groups":{"web":{"labels":{"role":"web"}}},"formulas":[{"id":"app","group":"web","rollout":` + rollout +
		`,"nodes":[{"name":"n","run":"true"}]` + gate + `},{"id":"after","server":"h1","depends_on":["app"],"nodes":[{"name":"m","run":"true"}]}]}`
	c, err := dag.ParseJSONComposition([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return dag.PlanLoaded(c)
}

// drive runs a plan to its end: each dispatched formula ends as fail says
// (failed, else succeeded), each gate passes. It returns what happened,
// in order: "start X", "end X <state>", "blocked X by Y", "cancelled X".
func drive(p *dag.Plan, fail map[string]bool) (log []string, result dag.WorkflowState) {
	s := p.NewRunState()
	for range 100 {
		d := p.Step(s)
		s.Apply(d)
		for _, b := range d.Blocked {
			log = append(log, "blocked "+p.Formulas[b.Formula].ID+" by "+p.Formulas[b.Blocker].ID)
		}
		for _, b := range d.Cancelled {
			log = append(log, "cancelled "+p.Formulas[b.Formula].ID)
		}
		if d.Done {
			return log, d.Result
		}
		// Everything dispatched at once runs at once: one batch.
		for _, i := range d.Dispatch {
			log = append(log, "start "+p.Formulas[i].ID)
		}
		for _, i := range d.Dispatch {
			st := dag.FormulaSucceeded
			if fail[p.Formulas[i].ID] {
				st = dag.FormulaFailed
			}
			_ = s.SetFormula(i, st, -1)
			log = append(log, "end "+p.Formulas[i].ID+" "+string(st))
			if a, b := decided(p.StepAfter(s, i)), decided(p.Step(s)); !slices.Equal(a, b) {
				log = append(log, fmt.Sprintf("StepAfter %q differs from Step %q", a, b))
			}
		}
		for _, i := range d.Gate {
			_ = s.SetFormula(i, dag.FormulaHealthy, -1)
			log = append(log, "healthy "+p.Formulas[i].ID)
		}
	}
	return append(log, "did not end"), ""
}

func TestRollout(t *testing.T) {
	cases := []struct {
		name      string
		hosts     int
		rollout   string
		onFailure dag.OnFailure
		gated     bool
		fail      []string
		want      []string
		result    dag.WorkflowState
	}{{
		name: "one at a time, all pass", hosts: 3, rollout: `{"batch":1}`, onFailure: dag.OnFailureStop, gated: true,
		want: []string{"start app-h1", "end app-h1 succeeded", "healthy app-h1", "start app-h2", "end app-h2 succeeded", "healthy app-h2",
			"start app-h3", "end app-h3 succeeded", "healthy app-h3", "start after", "end after succeeded"},
		result: dag.WorkflowSucceeded,
	}, {
		name: "the second fails, max_failed 0: the third never runs", hosts: 3, rollout: `{"batch":1,"max_failed":0}`, onFailure: dag.OnFailureStop,
		fail:   []string{"app-h2"},
		want:   []string{"start app-h1", "end app-h1 succeeded", "start app-h2", "end app-h2 failed", "blocked app-h3 by app-h2", "blocked after by app-h2"},
		result: dag.WorkflowFailed,
	}, {
		name: "the same under on_failure continue", hosts: 3, rollout: `{"batch":1}`, onFailure: dag.OnFailureContinue,
		fail:   []string{"app-h2"},
		want:   []string{"start app-h1", "end app-h1 succeeded", "start app-h2", "end app-h2 failed", "blocked app-h3 by app-h2", "blocked after by app-h2"},
		result: dag.WorkflowFailed,
	}, {
		name: "a failure within max_failed: the rollout goes on, the run still fails", hosts: 4, rollout: `{"batch":2,"max_failed":1}`, onFailure: dag.OnFailureStop,
		fail: []string{"app-h1"},
		want: []string{"start app-h1", "start app-h2", "end app-h1 failed", "end app-h2 succeeded", "blocked after by app-h1", "start app-h3", "start app-h4",
			"end app-h3 succeeded", "end app-h4 succeeded"},
		result: dag.WorkflowFailed,
	}, {
		name: "percentages: batch 50% of 4, max_failed 25%; two failures stop it", hosts: 4, rollout: `{"batch":"50%","max_failed":"25%"}`, onFailure: dag.OnFailureStop,
		fail:   []string{"app-h1", "app-h2"},
		want:   []string{"start app-h1", "start app-h2", "end app-h1 failed", "end app-h2 failed", "blocked app-h3 by app-h1", "blocked app-h4 by app-h1", "blocked after by app-h1"},
		result: dag.WorkflowFailed,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fail := map[string]bool{}
			for _, f := range tc.fail {
				fail[f] = true
			}
			p := rolloutPlan(t, tc.hosts, tc.rollout, tc.onFailure, tc.gated)
			got, result := drive(p, fail)
			if !slices.Equal(got, tc.want) || result != tc.result {
				t.Errorf("got %q %s\nwant %q %s", got, result, tc.want, tc.result)
			}
		})
	}
}

// decided lists what a decision starts or stops, for comparing Step and
// StepAfter (which may leave out gates and dispatches already made).
func decided(d dag.Decision) []string {
	var out []string
	for _, b := range d.Blocked {
		out = append(out, fmt.Sprint("blocked ", b.Formula, " ", b.Blocker))
	}
	for _, b := range d.Cancelled {
		out = append(out, fmt.Sprint("cancelled ", b.Formula))
	}
	slices.Sort(out)
	return out
}

// Only a create runs instances in batches: a delete or check of the same
// composition has no rollout to announce.
func TestRolledOutOnlyInCreate(t *testing.T) {
	p := rolloutPlan(t, 3, `{"batch":1}`, dag.OnFailureStop, false)
	i, _ := p.Index("app-h2")
	if !p.RolledOut(i) {
		t.Fatalf("app-h2 of a create is not rolled out")
	}
	c := *p.Composition()
	c.Operation = dag.OpDelete
	d := dag.PlanLoaded(&c)
	if i, _ := d.Index("app-h2"); d.RolledOut(i) {
		t.Errorf("app-h2 of a delete is rolled out")
	}
}
