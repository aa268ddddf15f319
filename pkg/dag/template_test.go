package dag_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// templateDoc is a composition of one host with n vars whose one node
// runs run (JSON-quoted).
func templateDoc(n int, run string) string {
	vars := make([]string, n)
	for i := range n {
		vars[i] = fmt.Sprintf(`"v%d":"x"`, i)
	}
	return `{"name":"t","vars":{` + strings.Join(vars, ",") + `},"hosts":{"h":{"transport":"local"}},` +
		`"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":` + fmt.Sprintf("%q", run) + `}]}]}`
}

// nestedCalls is templates that each call the next one twice, 40 deep:
// 2^40 calls from a few lines.
func nestedCalls() string {
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, `{{define "t%d"}}{{template "t%d"}}{{template "t%d"}}{{end}}`, i, i+1, i+1)
	}
	b.WriteString(`{{define "t40"}}{{end}}{{template "t0"}}echo`)
	return b.String()
}

// TestTemplateCostIsBounded: a composition is rendered by whoever loads
// it (the planner for an operator's submit, the state-store for a
// viewer's drift request), so a template that would run for hours is a
// problem with its path, found in bounded time. Each of these ran
// without end before the bounds.
func TestTemplateCostIsBounded(t *testing.T) {
	cases := []struct {
		name, run string
		vars      int
		msg       string
	}{
		{"range over a variable holding a number", `{{ $n := 9000000000000000000 }}{{ range $n }}{{ end }}echo`, 1, "range over a number is not allowed"},
		{"range over len", `{{ range len .Host }}{{ end }}echo`, 1, "range over a number is not allowed"},
		{"templates calling each other", nestedCalls(), 1, "define and block are not allowed"},
		{"a template call", `{{ template "x" }}echo`, 1, "calling a template"},
		{"block", `{{ block "x" . }}echo{{ end }}`, 1, "define and block are not allowed"},
		{"nested loops over the vars", `{{ range .Vars }}{{ range $.Vars }}{{ range $.Vars }}{{ end }}{{ end }}{{ end }}echo`, 2000, "takes more than"},
		{"printf in nested loops", `{{ range .Vars }}{{ range $.Vars }}{{ $x := printf "%999999s" "" }}{{ end }}{{ end }}echo`, 200, "takes more than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := dag.ParseJSONComposition([]byte(templateDoc(tc.vars, tc.run))); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("still rendering after a minute")
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, p := range problemsOf(t, err) {
				if p.Path == "formulas[0].nodes[0].run" && p.Code == dag.CodeTemplate && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Errorf("no template problem %q at formulas[0].nodes[0].run in:\n%s", tc.msg, fmtProblems(problemsOf(t, err)))
		})
	}
}

// TestTemplateBudgetIsReportedOnce: once the steps are spent, every later
// template fails the same way; the composition gets one problem, not one
// per host.
func TestTemplateBudgetIsReportedOnce(t *testing.T) {
	var hosts []string
	for i := range 300 {
		hosts = append(hosts, fmt.Sprintf(`"h%d":{"transport":"local","labels":{"r":"x"}}`, i))
	}
	vars := make([]string, 300)
	for i := range vars {
		vars[i] = fmt.Sprintf(`"v%d":"x"`, i)
	}
	run := `{{ range .Vars }}{{ range $.Vars }}{{ end }}{{ end }}echo`
	doc := `{"name":"t","vars":{` + strings.Join(vars, ",") + `},"hosts":{` + strings.Join(hosts, ",") + `},"groups":{"g":{"labels":{"r":"x"}}},` +
		`"formulas":[{"id":"f","group":"g","nodes":[{"name":"n","run":` + fmt.Sprintf("%q", run) + `}]}]}`
	_, err := dag.ParseJSONComposition([]byte(doc))
	if err == nil {
		t.Fatal("accepted")
	}
	n := 0
	for _, p := range problemsOf(t, err) {
		if strings.Contains(p.Message, "takes more than") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d step problems, want 1:\n%s", n, fmtProblems(problemsOf(t, err)))
	}
}

// TestTemplatesStillRender: loops over the vars and labels, conditions,
// printf and shq render as before.
func TestTemplatesStillRender(t *testing.T) {
	run := `{{ range $k, $v := .Vars }}{{ $k }}={{ shq $v }} {{ end }}{{ if eq .Host "h" }}{{ printf "%s!" .Host }}{{ end }}{{ range .Labels }}never{{ else }} none{{ end }}`
	c := loadFleet(t, templateDoc(2, run))
	if got, want := c.Formulas[0].Nodes[0].Run, `v0='x' v1='x' h! none`; got != want {
		t.Errorf("rendered %q, want %q", got, want)
	}
}

// TestLargeFleetRendersWithinTheSteps: the bound leaves room for a large
// fleet's templates: 10,000 hosts, 5 nodes each, two templates a node.
func TestLargeFleetRendersWithinTheSteps(t *testing.T) {
	var hosts []string
	for i := range 10_000 {
		hosts = append(hosts, fmt.Sprintf(`"h%d":{"transport":"local","labels":{"r":"x","zone":"z%d"},"vars":{"port":"%d"}}`, i, i%7, 8000+i%100))
	}
	var nodes []string
	for i := range 5 {
		nodes = append(nodes, fmt.Sprintf(`{"name":"n%d","run":"echo {{ .Host }} {{ .Vars.domain }}:{{ .Vars.port }} {{ shq .Labels.zone }} %d","env":{"WHERE":"{{ .Host }}.{{ .Labels.zone }}"}}`, i, i))
	}
	doc := `{"name":"big","vars":{"domain":"example.com"},"hosts":{` + strings.Join(hosts, ",") + `},"groups":{"g":{"labels":{"r":"x"}}},` +
		`"formulas":[{"id":"f","group":"g","nodes":[` + strings.Join(nodes, ",") + `]}]}`
	c := loadFleet(t, doc)
	if len(c.Formulas) != 10_000 {
		t.Fatalf("%d formulas", len(c.Formulas))
	}
	if got := c.Formulas[9999].Nodes[4].Run; got != "echo h9999 example.com:8099 'z3' 4" {
		t.Errorf("rendered %q", got)
	}
}
