package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
)

// dottedComposition: two sshd hosts named as machines are, an IPv4
// address and a fully qualified name (both reached at 127.0.0.1 and
// their sshd's port), a formula on one and a group formula with a health
// gate on both; every node prints its host and a var.
func dottedComposition(s *stack) string {
	h, user := s.fleet.Hosts, s.fleet.User
	return fmt.Sprintf(`name: dotted
vars: {env: composition}
hosts:
  10.0.0.5: {address: %q, user: %s, labels: {role: web}}
  web-1.example.com: {address: %q, user: %s, labels: {role: web}}
groups:
  web: {labels: {role: web}}
formulas:
  - id: base
    server: 10.0.0.5
    nodes: [{name: hello, run: "echo hello from {{ .Host }} env={{ .Vars.env }}"}]
  - id: app
    group: web
    depends_on: [base]
    nodes: [{name: conf, run: "echo conf on {{ .Host }} env={{ .Vars.env }}"}]
    health_gate: {check: "test {{ .Host }} = $(echo {{ .Host }})", timeout: 10s, retries: 2}
`, h[0].Addr, user, h[1].Addr, user)
}

// Hosts named 10.0.0.5 and web-1.example.com run, and are shown by those
// names in gantry status, logs, state --host and the web view; a nats sub
// on the documented token subject decky.10_0_0_5.lifecycle sees the
// first one's lifecycle. The run's --var wins over the composition's var,
// and is kept with the workflow: status shows it (a secret-looking one
// masked), the planner's record has it, drift with it says ok.
func TestDottedHostNames(t *testing.T) {
	nats, err := natsCLI()
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{hosts: 2})
	bin := buildGantry(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "dotted.yaml")
	if err := os.WriteFile(file, []byte(dottedComposition(s)), 0o644); err != nil {
		t.Fatal(err)
	}
	varFile := filepath.Join(dir, "vars.yaml")
	if err := os.WriteFile(varFile, []byte("env: from-file\napi_token: s3cret-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gantry := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, isExit := err.(*exec.ExitError); isExit {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}

	// A viewer's nats sub on the host token's subject, as the docs say.
	sub := exec.Command(nats, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Viewer), "sub", "decky.10_0_0_5.lifecycle", "--count", "4")
	subOut, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	sub.Stderr = sub.Stdout
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Process.Kill(); _ = sub.Wait() })
	subLines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(subOut)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			subLines <- sc.Text()
		}
		close(subLines)
	}()
	var subSeen strings.Builder
	waitSub := time.After(20 * time.Second)
	for !strings.Contains(subSeen.String(), "Subscribing on decky.10_0_0_5.lifecycle") {
		select {
		case l, ok := <-subLines:
			if !ok {
				t.Fatalf("nats sub ended:\n%s", subSeen.String())
			}
			subSeen.WriteString(l + "\n")
		case <-waitSub:
			t.Fatalf("nats sub did not subscribe:\n%s", subSeen.String())
		}
	}

	code, out := gantry("submit", file, "--watch", "--var-file", varFile, "--var", "env=from-flag")
	t.Logf("gantry submit --watch:\n%s", out)
	if code != 0 || !strings.Contains(out, "workflow dotted SUCCEEDED") {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	m := regexp.MustCompile(`accepted ([0-9a-f-]{36})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no workflow id in\n%s", out)
	}
	id := m[1]
	for _, want := range []string{"10.0.0.5", "web-1.example.com", "app-10_0_0_5", "app-web-1_example_com"} {
		if !strings.Contains(out, want) {
			t.Errorf("watch does not show %s", want)
		}
	}
	doc := s.wait(id, 30*time.Second)
	for _, f := range []string{"app-10_0_0_5", "app-web-1_example_com"} {
		if fd := doc.Formulas[f]; fd == nil || fd.Status != "healthy" || fd.Health == nil || fd.Health.Status != events.HealthPass {
			t.Errorf("%s's health gate on its dotted host: %+v", f, fd)
		}
	}
	if doc.Formulas["base"].Host != "10.0.0.5" || doc.Formulas["app-web-1_example_com"].Host != "web-1.example.com" {
		t.Errorf("workflow document hosts: base on %q, app-web-1_example_com on %q", doc.Formulas["base"].Host, doc.Formulas["app-web-1_example_com"].Host)
	}

	// gantry status: the names, and the vars it was submitted with.
	code, out = gantry("status", id)
	t.Logf("gantry status:\n%s", out)
	if code != 0 || !regexp.MustCompile(`(?m)^app-web-1_example_com\s+web-1\.example\.com\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^base\s+10\.0\.0\.5\s`).MatchString(out) ||
		!strings.Contains(out, "vars (--var, --var-file): api_token=***, env=from-flag") || strings.Contains(out, "s3cret") {
		t.Errorf("status: exit %d\n%s", code, out)
	}

	// gantry logs ID HOST: that host's lines, under its name; --var won
	// over the var file, which won over the composition.
	code, out = gantry("logs", id, "10.0.0.5")
	t.Logf("gantry logs %s 10.0.0.5:\n%s", id, out)
	if code != 0 || !regexp.MustCompile(`10\.0\.0\.5\s+base/hello\s+stdout hello from 10\.0\.0\.5 env=from-flag`).MatchString(out) ||
		!regexp.MustCompile(`10\.0\.0\.5\s+app-10_0_0_5/conf\s+stdout conf on 10\.0\.0\.5 env=from-flag`).MatchString(out) ||
		strings.Contains(out, "web-1.example.com") {
		t.Errorf("logs of 10.0.0.5: exit %d\n%s", code, out)
	}
	code, out = gantry("logs", id, "web-1.example.com")
	if code != 0 || !strings.Contains(out, "conf on web-1.example.com env=from-flag") || strings.Contains(out, "hello from") {
		t.Errorf("logs of web-1.example.com: exit %d\n%s", code, out)
	}

	// gantry state --host NAME: that host's records, under its name (the
	// state-store's projection may be a few events behind: polled).
	for _, host := range []string{"10.0.0.5", "web-1.example.com"} {
		var rows []string
		for i := 0; i < 50; i++ {
			code, out = gantry("state", "--host", host)
			rows = regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(host)+`\s+dotted\s+\S+\s+\S+\s+succeeded`).FindAllString(out, -1)
			if want := map[string]int{"10.0.0.5": 2, "web-1.example.com": 1}[host]; code == 0 && len(rows) == want {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("gantry state --host %s:\n%s", host, out)
		if want := map[string]int{"10.0.0.5": 2, "web-1.example.com": 1}[host]; code != 0 || len(rows) != want || strings.Count(out, "\n") != want+1 {
			t.Errorf("state --host %s: exit %d, %d succeeded rows, want %d\n%s", host, code, len(rows), want, out)
		}
	}

	// drift with the vars it ran with: ok; without them a command differs.
	code, out = gantry("drift", file, "--records", "--var-file", varFile, "--var", "env=from-flag")
	if code != 0 || !strings.Contains(out, "dotted: 3 ok, 0 changed, 0 missing, 0 orphaned") {
		t.Errorf("drift with the vars: exit %d\n%s", code, out)
	}
	code, out = gantry("drift", file, "--records")
	if code != 4 || !strings.Contains(out, "dotted: 0 ok, 3 changed") {
		t.Errorf("drift without the vars: exit %d\n%s", code, out)
	}

	// The planner's record keeps the vars (a retry runs what was used).
	wfs, err := eventbus.NewBucket[map[string]any](context.Background(), s.js, events.BucketWorkflows)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := wfs.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	comp, _ := rec["composition"].(map[string]any)
	if ev, _ := comp["extra_vars"].(map[string]any); ev["env"] != "from-flag" || ev["api_token"] != "s3cret-token" {
		t.Errorf("record's extra_vars: %v", comp["extra_vars"])
	}

	// nats sub decky.10_0_0_5.lifecycle saw 10.0.0.5's events, with its name.
	deadline := time.After(20 * time.Second)
collect:
	for strings.Count(subSeen.String(), `"host":"10.0.0.5"`) < 4 {
		select {
		case l, ok := <-subLines:
			if !ok {
				break collect
			}
			subSeen.WriteString(l + "\n")
		case <-deadline:
			break collect
		}
	}
	t.Logf("nats sub decky.10_0_0_5.lifecycle (first 4 messages):\n%.3000s", subSeen.String())
	if n := strings.Count(subSeen.String(), `"host":"10.0.0.5"`); n < 4 || strings.Contains(subSeen.String(), "web-1.example.com") {
		t.Errorf("nats sub saw %d events of 10.0.0.5", n)
	}

	// The web view shows each formula on its host by name.
	base := startUI(t, s, bin)
	ctx := browser(t)
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/w/"+id), chromedp.WaitVisible(`#wf-state[data-state="succeeded"]`)); err != nil {
		t.Fatalf("web view: %v", err)
	}
	hosts, err := chromedp.Run(tctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll(".formula[data-formula]")].map(e => [e.dataset.formula, (e.querySelector(".fhost") || {}).textContent || ""]))`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("web view: formula -> host %v", hosts)
	want := map[string]string{"base": "@10.0.0.5", "app-10_0_0_5": "@10.0.0.5", "app-web-1_example_com": "@web-1.example.com"}
	for f, h := range want {
		if hosts[f] != h {
			t.Errorf("web view shows %s on %q, want %q", f, hosts[f], h)
		}
	}
}
