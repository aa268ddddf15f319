package template_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// These tests load compositions as the planner and the CLI do
// (dag.ParseJSONComposition renders every template through this package),
// so each bound is seen as the problem it makes.

func loadFleet(t *testing.T, doc string) *dag.Composition {
	t.Helper()
	c, err := dag.ParseJSONComposition([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func problemsOf(t *testing.T, err error) []dag.Problem {
	t.Helper()
	var inv *dag.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("expected *InvalidError, got %T: %v", err, err)
	}
	return inv.Problems
}

func fmtProblems(ps []dag.Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s [%s]\n", p, p.Code)
	}
	return b.String()
}

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

// TestTemplateCostIsBounded: the planner renders what an operator
// submits, so a template that would run for hours by mistake is a
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
		{"a printf over the cap", `{{ $a := printf "%999999d%999999d%999999d" 1 2 3 }}echo`, 1, "printf makes more than 262144 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refusedWithin(t, templateDoc(tc.vars, tc.run), "formulas[0].nodes[0].run", tc.msg)
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
// comparisons, index and the text functions render as text/template's
// own do.
func TestTemplatesStillRender(t *testing.T) {
	run := `{{ . }} {{ .Vars }} {{ printf "%v" .Labels }} {{ range $k, $v := .Vars }}{{ $k }}={{ shq $v }} {{ end }}{{ if eq .Host "a" "h" }}{{ printf "%s!" .Host }}{{ end }}{{ range .Labels }}never{{ else }} none{{ end }}` +
		` {{ index .Vars "v1" }}{{ if ne .Vars.v0 "y" }} ne{{ end }}{{ if lt 1 2 }} lt{{ end }}{{ if ge (len .Vars) 2 }} ge{{ end }}` +
		`{{ if gt "b" "a" }} gt{{ end }}{{ if le 2.5 2.5 }} le{{ end }} {{ index .Host 0 }} {{ html "<a>" }} {{ js "'" }} {{ urlquery "a b" }} {{ print 1 "x" }}`
	c := loadFleet(t, templateDoc(2, run))
	if got, want := c.Formulas[0].Nodes[0].Run, `<host h> <2 entries> <0 entries> v0='x' v1='x' h! none x ne lt ge gt le 104 &lt;a&gt; \' a+b 1x`; got != want {
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

// varsDoc is templateDoc with the vars given as raw JSON members.
func varsDoc(vars []string, run string) string {
	return `{"name":"t","vars":{` + strings.Join(vars, ",") + `},"hosts":{"h":{"transport":"local"}},` +
		`"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":` + fmt.Sprintf("%q", run) + `}]}]}`
}

// groupDoc is a composition of n hosts in one group, whose formula's one
// node runs run and checks check.
func groupDoc(n int, run, check string) string {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf(`"h%d":{"transport":"local","labels":{"r":"x"}}`, i)
	}
	return `{"name":"t","vars":{"b":"c"},"hosts":{` + strings.Join(hosts, ",") + `},"groups":{"g":{"labels":{"r":"x"}}},` +
		`"formulas":[{"id":"f","group":"g","nodes":[{"name":"n","run":` + fmt.Sprintf("%q", run) + `,"check":` + fmt.Sprintf("%q", check) + `}]}]}`
}

// TestLargeOutputIsBounded: what templates render is bounded, one
// template, one function call and the whole composition: long commands
// on many hosts, or a function that makes more than a template may hold,
// are a problem with their path, not gigabytes in the planner.
func TestLargeOutputIsBounded(t *testing.T) {
	long := strings.Repeat("a", 300<<10)
	cases := []struct {
		name, doc, path, msg string
	}{
		{"a long command on 11,000 hosts (each within a script's 120 KiB)", groupDoc(11000, long[:100<<10]+"{{ .Host }}", long[:100<<10]+"{{ .Vars.b }}"),
			"*", "steps or 128 MiB"},
		{"a hex dump over the cap", varsDoc([]string{`"x":"` + long[:250<<10] + `"`}, `{{ $y := printf "% #x" .Vars.x }}{{ len $y }}`),
			"formulas[0].nodes[0].run", "printf makes more than 262144 bytes"},
		{"a var printed past the cap", varsDoc([]string{`"x":"` + long[:100<<10] + `"`}, `{{ .Vars.x }}{{ .Vars.x }}{{ .Vars.x }}`),
			"formulas[0].nodes[0].run", "renders to more than 262144 bytes"},
		{"html of a long var", varsDoc([]string{`"x":"` + strings.Repeat("<", 100<<10) + `"`}, `{{ $y := html .Vars.x }}echo`),
			"formulas[0].nodes[0].run", "html makes more than 262144 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { refusedWithin(t, tc.doc, tc.path, tc.msg) })
	}
}

// TestPrintOfLongTextsIsRefusedBeforeJoining: print and println refuse
// texts longer than a template may hold together before joining them
// (3,000 copies of a 300 KiB var would make 900 MB first).
func TestPrintOfLongTextsIsRefusedBeforeJoining(t *testing.T) {
	long := strings.Repeat("a", 300<<10)
	refusedWithin(t, varsDoc([]string{`"x":"` + long + `"`}, `{{ $x := .Vars.x }}{{ $a := print`+strings.Repeat(" $x", 3000)+` }}echo`),
		"formulas[0].nodes[0].run", "print makes more than 262144 bytes")
}

// TestFleetEnvFilesRender: a fleet of 5,000 hosts whose 5 nodes each
// write an env file from 30 vars in a loop stays within the steps.
func TestFleetEnvFilesRender(t *testing.T) {
	vars := make([]string, 30)
	for i := range vars {
		vars[i] = fmt.Sprintf(`"var_%d":"value-%d"`, i, i)
	}
	hosts := make([]string, 5000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf(`"h%d":{"transport":"local","labels":{"r":"x"}}`, i)
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
	if got := c.Formulas[0].Nodes[0].Run; !strings.Contains(got, "export var_9='value-9'\n") {
		t.Errorf("rendered %q", got)
	}
}

// refusedWithin loads doc, which must be refused within a minute with one
// short template problem at path ("*": any) saying msg.
func refusedWithin(t *testing.T, doc, path, msg string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := dag.ParseJSONComposition([]byte(doc)); done <- err }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("still rendering after a minute")
	}
	if err == nil {
		t.Fatal("accepted")
	}
	ps := problemsOf(t, err)
	if len(ps) != 1 {
		t.Errorf("%d problems, want 1:\n%.2000s", len(ps), fmtProblems(ps))
	}
	for _, p := range ps {
		if (path == "*" || p.Path == path) && p.Code == dag.CodeTemplate && strings.Contains(p.Message, msg) {
			if len(p.Message) > 1024 {
				t.Errorf("a problem of %d bytes", len(p.Message))
			}
			return
		}
	}
	t.Errorf("no template problem %q at %s in:\n%.2000s", msg, path, fmtProblems(ps))
}

// TestEnvFanOutBounded: env values are copied for every instance, so a
// composition fanning out into more than MaxExpandedEnv of them is refused
// before anything is made.
func TestEnvFanOutBounded(t *testing.T) {
	env := make([]string, 3000)
	for i := range env {
		env[i] = fmt.Sprintf(`"E%d":"v"`, i)
	}
	hosts := make([]string, 1000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf(`"h%d":{"transport":"local","labels":{"r":"x"}}`, i)
	}
	doc := `{"name":"t","hosts":{` + strings.Join(hosts, ",") + `},"groups":{"g":{"labels":{"r":"x"}}},` +
		`"formulas":[{"id":"f","group":"g","nodes":[{"name":"n","run":"true","env":{` + strings.Join(env, ",") + `}}]}]}`
	_, err := dag.ParseJSONComposition([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "fan out into 3000000 env values, more than 2000000") {
		t.Fatalf("error %v", err)
	}
}

// TestTemplateFromJSON: a list or a mapping of an inventory reaches a
// host's vars as its JSON; fromjson lets a template go over the list and
// read the mapping's fields, within the steps.
func TestTemplateFromJSON(t *testing.T) {
	doc := func(run string) string {
		return `{"name":"t","hosts":{"h":{"transport":"local","vars":{"ntp":"[\"0.pool.ntp.org\",\"1.pool.ntp.org\"]","cfg":"{\"port\":8080,\"tls\":true}","bad":"not json"}}},` +
			`"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":` + fmt.Sprintf("%q", run) + `}]}]}`
	}
	c := loadFleet(t, doc(`{{ range fromjson .Vars.ntp }}server {{ . }}; {{ end }}port={{ (fromjson .Vars.cfg).port }} tls={{ (fromjson .Vars.cfg).tls }} second={{ index (fromjson .Vars.ntp) 1 }} raw={{ .Vars.ntp }}`))
	want := `server 0.pool.ntp.org; server 1.pool.ntp.org; port=8080 tls=true second=1.pool.ntp.org raw=["0.pool.ntp.org","1.pool.ntp.org"]`
	if got := c.Formulas[0].Nodes[0].Run; got != want {
		t.Errorf("rendered %q, want %q", got, want)
	}
	refusedWithin(t, doc(`{{ range fromjson .Vars.bad }}{{ end }}echo`), "formulas[0].nodes[0].run", "fromjson: the value is not JSON")
	refusedWithin(t, doc(`{{ range fromjson .Vars.cfg }}{{ end }}{{ range "abc" }}{{ end }}echo`), "formulas[0].nodes[0].run", "range over a string is not allowed")
	// A long list in nested loops costs its items' runs.
	items := make([]string, 3000)
	for i := range items {
		items[i] = fmt.Sprintf(`"%d"`, i)
	}
	long := `{"name":"t","hosts":{"h":{"transport":"local","vars":{"l":` + fmt.Sprintf("%q", "["+strings.Join(items, ",")+"]") + `}}},` +
		`"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":"{{ range fromjson .Vars.l }}{{ range fromjson $.Vars.l }}{{ range fromjson $.Vars.l }}{{ end }}{{ end }}{{ end }}echo"}]}]}`
	refusedWithin(t, long, "formulas[0].nodes[0].run", "takes more than")
}
