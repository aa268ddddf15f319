package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/gantry-dev/gantry/pkg/events"
)

// chromium is the browser the web view is tested in (Debian's chromium).
const chromium = "/usr/bin/chromium"

// webviewShot, when set, is where TestWebViewLive saves its screenshot
// taken during the run (docs/webview.png is made this way).
var webviewShot = os.Getenv("GANTRY_WEBVIEW_SCREENSHOT")

// startUI runs `gantry ui` as the viewer against the stack and returns
// its base URL.
func startUI(t *testing.T, s *stack, bin string) string {
	t.Helper()
	base, _ := startUIAt(t, s, bin, "127.0.0.1:0")
	return base
}

// startUIAt runs `gantry ui` on addr, with the extra flags given; stop
// ends it.
func startUIAt(t *testing.T, s *stack, bin, addr string, extra ...string) (base string, stop func()) {
	t.Helper()
	args := append([]string{"ui", "--http", addr, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Viewer)}, extra...)
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("gantry ui printed nothing: %v", err)
	}
	m := regexp.MustCompile(`web view at (http://[0-9.:]+)/`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("gantry ui: %q", line)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return m[1], stop
}

// browser starts headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s: %v (install Debian's chromium: apt-get install chromium)", chromium, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1500, 950), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// webviewComposition: a base formula on one host, a database formula
// whose nodes report progress and print markup, and a group formula
// rolled out over two hosts in batches of one. Every node sleeps a
// little, so the page can be watched changing.
func webviewComposition(s *stack) []byte {
	h := s.fleet.Hosts
	host := func(i int, role string) string {
		labels := ""
		if role != "" {
			labels = `, "labels": {"role": "` + role + `"}`
		}
		return fmt.Sprintf(`%q: {"address": %q, "user": %q%s}`, h[i].Name, h[i].Addr, s.fleet.User, labels)
	}
	return []byte(`{"name": "webview", "hosts": {` + host(0, "") + `, ` + host(1, "web") + `, ` + host(2, "web") + `},
	"groups": {"web": {"labels": {"role": "web"}}},
	"formulas": [
	  {"id": "base", "server": "` + h[0].Name + `", "nodes": [
	    {"name": "packages", "run": "echo installing packages; sleep 1.2; echo done"},
	    {"name": "users", "run": "echo adding users; sleep 1"}],
	   "health_gate": {"check": "true", "timeout": "10s", "retries": 2}},
	  {"id": "database", "server": "` + h[0].Name + `", "max_parallel": 2, "depends_on": [{"formula": "base", "condition": "healthy"}], "nodes": [
	    {"name": "install", "run": "for p in 10 35 60 85 100; do echo PROGRESS: $p; echo step $p; sleep 0.5; done"},
	    {"name": "config", "run": "echo '<script>window.__xss=1</script><img src=x onerror=window.__xss=2>'; echo warning: defaults used >&2; sleep 1.5"},
	    {"name": "start", "depends_on": ["install", "config"], "run": "echo started; sleep 1"}]},
	  {"id": "app", "group": "web", "rollout": {"batch": 1}, "depends_on": [{"formula": "database"}], "nodes": [
	    {"name": "conf", "run": "echo port=8080 host={{ .Host }}; sleep 1"},
	    {"name": "restart", "run": "sleep 0.8; echo restarted"}],
	   "health_gate": {"check": "true", "timeout": "10s", "retries": 2}}
	]}`)
}

// pageState reads, through CDP, the state of every node and formula on
// the page, the workflow's, and whether the page is the one first loaded.
type pageState struct {
	Workflow string            `json:"workflow"`
	Nodes    map[string]string `json:"nodes"`
	Formulas map[string]string `json:"formulas"`
	Marker   bool              `json:"marker"`
	XSS      any               `json:"xss"`
	Output   string            `json:"output"` // of the node in the panel
	Meta     string            `json:"meta"`   // what database/install's box says besides its name
}

const readPage = `(() => {
  const nodes = {}, formulas = {};
  for (const e of document.querySelectorAll("[data-node].node")) nodes[e.dataset.node] = e.dataset.state || "";
  for (const e of document.querySelectorAll(".formula[data-formula]")) formulas[e.dataset.formula] = e.dataset.state || "";
  const w = document.getElementById("wf-state");
  const out = document.querySelector("#panel pre.output");
  return {workflow: (w && w.dataset.state) || "", nodes, formulas, marker: window.__marker === 42, xss: window.__xss === undefined ? null : window.__xss,
    output: (out && out.textContent) || "",
    meta: (document.querySelector('[data-node="database/install"] .nmeta') || {}).textContent || ""};
})()`

func readState(t *testing.T, ctx context.Context) pageState {
	t.Helper()
	ps, err := chromedp.Run(ctx, chromedp.Evaluate[pageState](readPage))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	return ps
}

// The web view in a real browser: a page opened while a run goes shows
// node states change without a reload, a page loaded after the run shows
// what `gantry status` shows, output with markup is shown as text, and
// the server answers nothing but GET.
func TestWebViewLive(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 3})
	bin := buildGantry(t)
	base := startUI(t, s, bin)
	ctx := browser(t)

	r, code := s.submit(webviewComposition(s))
	if code != "" || r.Status != "accepted" {
		t.Fatalf("submit: %s %v", code, r.Errors)
	}
	id := r.WorkflowID
	page := base + "/w/" + id + "#node=database%2Finstall"
	tctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(page), chromedp.WaitVisible(`[data-node="base/packages"]`)); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	if _, err := chromedp.Run(tctx, chromedp.Evaluate[int](`window.__marker = 42`)); err != nil {
		t.Fatal(err)
	}

	seen := map[string][]string{} // node -> the states it showed, in order
	shot, liveOutput, progress := false, false, false
	start := time.Now()
	var last pageState
	for {
		last = readState(t, tctx)
		if !last.Marker {
			t.Fatalf("the page was reloaded")
		}
		for n, st := range last.Nodes {
			if h := seen[n]; len(h) == 0 || h[len(h)-1] != st {
				seen[n] = append(seen[n], st)
			}
		}
		// Output lines come from the log stream while the node runs (its
		// event's tails only come at its end).
		if last.Nodes["database/install"] == "running" && strings.Contains(last.Output, "step 10") {
			liveOutput = true
		}
		// PROGRESS: n lines become progress events: the box shows n%.
		if last.Nodes["database/install"] == "running" && strings.HasSuffix(last.Meta, "%") {
			progress = true
		}
		if !shot && last.Nodes["database/install"] == "running" && last.Meta == "60%" {
			png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			path := filepath.Join(t.TempDir(), "webview.png")
			if webviewShot != "" {
				path = webviewShot
			}
			if err := os.WriteFile(path, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot during the run: %s (%d bytes)", path, len(png))
			shot = true
		}
		if last.Workflow == "succeeded" || last.Workflow == "failed" {
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("the page did not show the end of the run; last %+v", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("states each node showed on the page, without a reload: %v", seen)
	if last.Workflow != "succeeded" {
		t.Fatalf("workflow %s on the page", last.Workflow)
	}
	if len(last.Nodes) != 9 || len(last.Formulas) != 4 {
		t.Errorf("page shows %d nodes and %d formulas, want 9 and 4: %+v", len(last.Nodes), len(last.Formulas), last)
	}
	changed := 0
	for n, h := range seen {
		if h[len(h)-1] != "succeeded" {
			t.Errorf("node %s ended %v on the page", n, h)
		}
		if len(h) > 1 && (h[0] == "pending" || h[0] == "running") {
			changed++
		}
	}
	if changed < 5 {
		t.Errorf("only %d nodes were seen changing state live: %v", changed, seen)
	}
	if !progress {
		t.Errorf("database/install never showed its progress while it ran")
	}
	if !liveOutput {
		t.Errorf("the panel never showed database/install's output while it ran")
	}
	if !shot {
		t.Errorf("never saw database/install at 60%%, to take the screenshot")
	}

	// Another node, chosen by the address's fragment: its output, which
	// has markup, is shown as text.
	if _, err := chromedp.Run(tctx, chromedp.Evaluate[string](`location.hash = "#node=database%2Fconfig"`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tctx, chromedp.WaitVisible(`#panel pre.output[data-node="database/config"]`)); err != nil {
		t.Fatal(err)
	}

	// Output with markup is text: nothing ran, nothing was inserted.
	text, err := chromedp.Run(tctx, chromedp.TextContent(`#panel pre.output`))
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll("#panel pre.output *:not(span), img").length`))
	if err != nil {
		t.Fatal(err)
	}
	if last.XSS != nil || imgs != 0 || !strings.Contains(text, "<script>window.__xss=1</script><img src=x onerror=window.__xss=2>") {
		t.Errorf("markup in output: xss=%v, %d elements, text %q", last.XSS, imgs, text)
	}
	if !strings.Contains(text, "warning: defaults used") {
		t.Errorf("stderr line missing from the output: %q", text)
	}

	// A late load shows what gantry status shows.
	doc := s.wait(id, 30*time.Second)
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/w/"+id), chromedp.WaitVisible(`#wf-state[data-state="succeeded"]`)); err != nil {
		t.Fatalf("late load: %v", err)
	}
	late := readState(t, tctx)
	for fid, f := range doc.Formulas {
		if late.Formulas[fid] != string(f.Status) {
			t.Errorf("late load: formula %s is %q on the page, %q in gantry status", fid, late.Formulas[fid], f.Status)
		}
		for n, nd := range f.Nodes {
			if late.Nodes[fid+"/"+n] != string(nd.Status) {
				t.Errorf("late load: node %s/%s is %q on the page, %q in gantry status", fid, n, late.Nodes[fid+"/"+n], nd.Status)
			}
		}
	}
	t.Logf("late load: workflow %s, formulas %v", late.Workflow, late.Formulas)

	// The list shows it, with who submitted it.
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(`tr[data-workflow="`+id+`"]`)); err != nil {
		t.Fatalf("list: %v", err)
	}
	row, err := chromedp.Run(tctx, chromedp.Text(`tr[data-workflow="`+id+`"]`))
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if !strings.Contains(row, "webview") || !strings.Contains(row, "succeeded") || !strings.Contains(row, "operator") {
		t.Errorf("list row: %q", row)
	}

	// GET only.
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		req, _ := http.NewRequest(m, base+"/api/workflows", strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s /api/workflows: %s", m, resp.Status)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "# TYPE") {
		t.Errorf("/metrics: %s %.200s", resp.Status, b)
	}
	var rows []events.WorkflowSummary
	resp, err = http.Get(base + "/api/workflows")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&rows)
	resp.Body.Close()
	if len(rows) != 1 || rows[0].SubmittedBy == nil || rows[0].EndedAt == nil {
		t.Errorf("/api/workflows: %+v", rows)
	}
}

// gantry dev --http serves the web view (as the dev stack's viewer) with
// its metrics, and a submitted run shows in its list.
func TestWebViewDev(t *testing.T) {
	bin := buildGantry(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "dev", "--port", "0", "--data-dir", filepath.Join(dir, "data"), "--http", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("gantry dev did not stop on SIGINT")
		}
	})
	var natsURL, web string
	sc := bufio.NewScanner(out)
	for (natsURL == "" || web == "") && sc.Scan() {
		line := sc.Text()
		if m := regexp.MustCompile(`NATS with JetStream at (nats://[0-9.:]+)`).FindStringSubmatch(line); m != nil {
			natsURL = m[1]
		}
		if m := regexp.MustCompile(`web view at (http://[0-9.:]+)/`).FindStringSubmatch(line); m != nil {
			web = m[1]
		}
	}
	if natsURL == "" || web == "" {
		t.Fatalf("gantry dev printed no NATS URL or web view address; stderr:\n%s", stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	for _, p := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get(web + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %s", p, resp.Status)
		}
	}
	doc := filepath.Join(dir, "one.yaml")
	os.WriteFile(doc, []byte("name: one\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: 'echo hi'}]\n"), 0o644)
	deadline := time.Now().Add(30 * time.Second)
	for { // the CLI finds the dev operator's key; the services may still be starting
		b, err := exec.Command(bin, "submit", doc, "--watch", "--server", natsURL).CombinedOutput()
		if err == nil {
			break
		}
		if !strings.Contains(string(b), "no service answers") || time.Now().After(deadline) {
			t.Fatalf("submit: %v\n%s", err, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		var rows []events.WorkflowSummary
		resp, err := http.Get(web + "/api/workflows")
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&rows)
			resp.Body.Close()
		}
		if len(rows) == 1 && rows[0].Workflow == "one" && rows[0].Status == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the web view's list: %+v (%v)", rows, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The list page in a real browser is live without polling: a workflow
// submitted while it is open appears, and its state changes to
// succeeded, without a reload, and the page never asks for the list
// again (it has one stream, /api/workflows/events).
func TestWebViewListLive(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	bin := buildGantry(t)
	base, stopUI := startUIAt(t, s, bin, "127.0.0.1:0")
	ctx := browser(t)
	tctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()

	var mu sync.Mutex
	requests := map[string]int{} // path -> requests the page made
	err := chromedp.Listen(tctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			if u, err := url.Parse(e.Request.URL); err == nil {
				mu.Lock()
				requests[u.Path]++
				mu.Unlock()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(`#conn[data-conn="live"]`)); err != nil {
		t.Fatalf("open the list: %v", err)
	}
	if _, err := chromedp.Run(tctx, chromedp.Evaluate[int](`window.__marker = 42`)); err != nil {
		t.Fatal(err)
	}

	h := s.fleet.Hosts[0]
	comp := fmt.Sprintf(`{"name": "listlive", "hosts": {%q: {"address": %q, "user": %q}},
	"formulas": [{"id": "base", "server": %q, "nodes": [{"name": "slow", "run": "sleep 2; echo done"}]}]}`, h.Name, h.Addr, s.fleet.User, h.Name)
	r, code := s.submit([]byte(comp))
	if code != "" || r.Status != "accepted" {
		t.Fatalf("submit: %s %v", code, r.Errors)
	}
	id := r.WorkflowID

	// Watch the row's state through CDP until it is succeeded.
	type rowState struct {
		State  string `json:"state"`
		Text   string `json:"text"`
		Marker bool   `json:"marker"`
	}
	read := `(() => { const r = document.querySelector('tr[data-workflow="` + id + `"]');
	  return {state: r ? r.dataset.state : "", text: r ? r.textContent : "", marker: window.__marker === 42}; })()`
	var seen []string
	var last rowState
	deadline := time.Now().Add(90 * time.Second)
	for {
		rs, err := chromedp.Run(tctx, chromedp.Evaluate[rowState](read))
		if err != nil {
			t.Fatalf("read the list: %v", err)
		}
		last = rs
		if !rs.Marker {
			t.Fatalf("the list page was reloaded")
		}
		if rs.State != "" && (len(seen) == 0 || seen[len(seen)-1] != rs.State) {
			seen = append(seen, rs.State)
		}
		if rs.State == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the row of %s: states seen %v, last %+v", id, seen, rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("row states seen without a reload: %v", seen)
	if len(seen) < 2 {
		t.Errorf("the row showed no state before succeeded: %v (it should appear while the run goes)", seen)
	}
	if !strings.Contains(last.Text, "listlive") || !strings.Contains(last.Text, "operator") {
		t.Errorf("list row: %q", last.Text)
	}
	mu.Lock()
	if requests["/api/workflows"] != 0 || requests["/api/workflows/events"] != 1 {
		t.Errorf("the list page polled: requests %v (want one /api/workflows/events, no /api/workflows)", requests)
	}
	mu.Unlock()

	// The stream drops (the server stops); a workflow runs meanwhile; the
	// server comes back on the same address: the page, not reloaded,
	// reconnects by itself and shows that workflow from the new snapshot.
	stopUI()
	r, code = s.submit([]byte(comp))
	if code != "" || r.Status != "accepted" {
		t.Fatalf("submit while the web view is down: %s %v", code, r.Errors)
	}
	s.wait(r.WorkflowID, 60*time.Second)
	startUIAt(t, s, bin, strings.TrimPrefix(base, "http://"))
	read = strings.ReplaceAll(read, id, r.WorkflowID)
	for {
		rs, err := chromedp.Run(tctx, chromedp.Evaluate[rowState](read))
		if err != nil {
			t.Fatalf("read the list: %v", err)
		}
		if !rs.Marker {
			t.Fatalf("the list page was reloaded")
		}
		if rs.State == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the server came back, the row of %s: %+v", r.WorkflowID, rs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("requests of the page: %v", requests)
	if requests["/api/workflows"] != 0 || requests["/api/workflows/events"] < 2 {
		t.Errorf("after a reconnect: requests %v (want /api/workflows/events again, no /api/workflows)", requests)
	}
}
