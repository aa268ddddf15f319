package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
)

// webviewDocs, when set, is the directory TestWebViewWork saves its
// screenshots in (docs/webview-timeline.png and docs/webview-host.png are
// made this way).
var webviewDocs = os.Getenv("GANTRY_WEBVIEW_DOCS")

// submitTraced submits a composition in the trace traceID, as a
// submitter running under a span would (its traceparent header).
func (s *stack) submitTraced(doc []byte, traceID string) string {
	s.t.Helper()
	h := nats.Header{}
	h.Set(events.TraceParentHeader, "00-"+traceID+"-00f067aa0ba902b7-01")
	r, err := s.cl.WithTimeout(35*time.Second).Submit(context.Background(), doc, h)
	if err != nil {
		s.t.Fatalf("submit: %s", failure(err))
	}
	if r.Status != "accepted" {
		s.t.Fatalf("submit: %s %v", r.Status, r.Errors)
	}
	return r.WorkflowID
}

// wideComposition is a DAG of three levels, a formula on each host, each
// with four nodes side by side: at 100% it is wider than a 1400 px
// window.
func wideComposition(s *stack) []byte {
	var hosts, formulas []string
	prev := ""
	for i, name := range []string{"packages", "database", "frontend"} {
		h := s.fleet.Hosts[i]
		hosts = append(hosts, fmt.Sprintf(`%q: {"address": %q, "user": %q}`, h.Name, h.Addr, s.fleet.User))
		dep := ""
		if prev != "" {
			dep = fmt.Sprintf(`, "depends_on": [{"formula": %q}]`, prev)
		}
		var nodes []string
		for _, n := range []string{"download-" + name, "install-" + name, "configure-" + name, "verify-" + name} {
			nodes = append(nodes, fmt.Sprintf(`{"name": %q, "run": "true"}`, n))
		}
		formulas = append(formulas, fmt.Sprintf(`{"id": %q, "server": %q, "max_parallel": 4%s, "nodes": [%s]}`, name, h.Name, dep, strings.Join(nodes, ", ")))
		prev = name
	}
	return []byte(`{"name": "wide", "hosts": {` + strings.Join(hosts, ", ") + `}, "formulas": [` + strings.Join(formulas, ", ") + `]}`)
}

// tlBar is a bar of the timeline as the page lays it out.
type tlBar struct {
	Node    string  `json:"node"`
	Attempt int     `json:"attempt"`
	Start   float64 `json:"start"`
	End     float64 `json:"end"`
	Running bool    `json:"running"`
	Width   float64 `json:"width"`
	State   string  `json:"state"`
}

const readBars = `[...document.querySelectorAll("#timeline .tl-bar.tl-n")].map((b) => ({node: b.dataset.node, attempt: +b.dataset.attempt,
  start: +b.dataset.start, end: +b.dataset.end, running: !!b.dataset.running, width: b.getBoundingClientRect().width, state: b.dataset.state}))`

// rect is an element's box in the viewport.
type rect struct {
	Left, Top, Right, Bottom float64
}

func (r rect) inside(o rect) bool {
	return r.Left >= o.Left && r.Top >= o.Top && r.Right <= o.Right && r.Bottom <= o.Bottom && r.Right > r.Left
}

// lastNode is the box of the last node of the last formula on the page,
// and of the DAG's scrolling view.
const lastNode = `(() => { const fs = document.querySelectorAll(".formula[data-formula]"); const f = fs[fs.length - 1];
  const ns = f.querySelectorAll(".node"); const n = ns[ns.length - 1];
  const r = n.getBoundingClientRect(), w = document.getElementById("dag-wrap").getBoundingClientRect();
  return {node: n.dataset.node, zoom: +document.getElementById("dag-wrap").dataset.zoom, scrollY: window.scrollY,
    n: {left: r.left, top: r.top, right: r.right, bottom: r.bottom}, wrap: {left: w.left, top: w.top, right: w.right, bottom: w.bottom}}; })()`

type lastNodeBox struct {
	Node    string  `json:"node"`
	Zoom    float64 `json:"zoom"`
	ScrollY float64 `json:"scrollY"`
	N       rect    `json:"n"`
	Wrap    rect    `json:"wrap"`
}

func (b lastNodeBox) visible() bool {
	return b.ScrollY == 0 && b.N.inside(rect{0, 0, 1400, 900}) && b.N.inside(b.Wrap)
}

func evalJS[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %.60q: %v", js, err)
	}
	return v
}

// waitJS evaluates js until it is true, for at most d.
func waitJS(t *testing.T, ctx context.Context, what, js string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !evalJS[bool](t, ctx, js) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// navigate opens url, then does then within a minute; a load that
// Chromium gave up on because the machine's network changed (other tests
// come and go) is tried again.
func navigate(ctx context.Context, url string, then ...chromedp.Action[chromedp.Void]) error {
	var err error
	for range 3 {
		if err = chromedp.Do(ctx, chromedp.Navigate(url)); err == nil || !strings.Contains(err.Error(), "ERR_NETWORK_CHANGED") {
			break
		}
	}
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return chromedp.Do(wctx, then...)
}

func shoot(t *testing.T, ctx context.Context, name string, full bool) {
	t.Helper()
	act := chromedp.CaptureScreenshot()
	if full {
		act = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(ctx, act)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := webviewDocs
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// The web view to work in, in a real browser against the real services
// and sshd hosts, read as the viewer: a run's timeline (bars as wide as
// their durations, running ones growing), its DAG fitted into a
// 1400x900 window, its trace linked, a node's whole output as text and
// as a download, a host's page, a check run that found changes marked as
// such, and the list filtered from the address and the search box.
func TestWebViewWork(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 3})
	bin := buildGantry(t)
	base, _ := startUIAt(t, s, bin, "127.0.0.1:0", "--trace-url", "https://trace.example/trace/{trace_id}")
	ctx := browser(t)
	tctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.EmulateViewport(1400, 900)); err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	id := s.submitTraced(webviewComposition(s), traceID)
	h0 := s.fleet.Hosts[0].Name

	// The timeline while the run goes: a running bar grows without a
	// reload.
	if err := navigate(tctx, base+"/w/"+id+"?view=timeline", chromedp.WaitVisible(`#timeline .tl-bar.tl-n[data-running]`)); err != nil {
		t.Fatalf("timeline while running: %v", err)
	}
	evalJS[int](t, tctx, `window.__marker = 42`)
	first := evalJS[[]tlBar](t, tctx, readBars)
	var grow tlBar
	for _, b := range first {
		if b.Running {
			grow = b
		}
	}
	waitJS(t, tctx, "the running bar of "+grow.Node+" grows", fmt.Sprintf(`(() => { const b = document.querySelector('#timeline .tl-bar.tl-n[data-node=%q][data-attempt="%d"]');
	  return window.__marker === 42 && !!b && b.getBoundingClientRect().width > %f + 2; })()`, grow.Node, grow.Attempt, grow.Width), 30*time.Second)
	shot := false
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if !shot && evalJS[bool](t, tctx, `!!document.querySelector('#timeline .tl-bar.tl-n[data-running][data-node^="app-host-2/"]')`) {
			shoot(t, tctx, "webview-timeline.png", false)
			shot = true
		}
		if evalJS[string](t, tctx, `document.getElementById("wf-state").dataset.state`) == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not end on the page")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !shot {
		t.Errorf("never saw the last app instance running on the timeline")
	}

	// Once it ended: a bar per node, each as wide as its duration on one
	// scale.
	waitJS(t, tctx, "no running bar", `!document.querySelector("#timeline .tl-bar[data-running]")`, 10*time.Second)
	bars := evalJS[[]tlBar](t, tctx, readBars)
	if len(bars) != 9 {
		t.Fatalf("%d node bars, want one per node (9): %+v", len(bars), bars)
	}
	var scales []float64
	for _, b := range bars {
		if b.End < b.Start || b.State != "succeeded" {
			t.Errorf("bar %+v", b)
		}
		if b.End-b.Start >= 300 { // long enough that rounding a pixel does not matter
			scales = append(scales, b.Width/(b.End-b.Start))
		}
	}
	sort.Float64s(scales)
	if len(scales) < 6 {
		t.Fatalf("only %d bars last 300 ms or more: %+v", len(scales), bars)
	}
	med := scales[len(scales)/2]
	for _, b := range bars {
		if d := b.End - b.Start; d >= 300 && math.Abs(b.Width-d*med) > 1.5 {
			t.Errorf("bar of %s is %.1f px for %.0f ms; at %.4f px/ms it would be %.1f px", b.Node, b.Width, d, med, d*med)
		}
	}
	t.Logf("timeline: %d bars at %.4f px/ms", len(bars), med)

	// The trace is linked.
	href := evalJS[string](t, tctx, `(document.getElementById("wf-trace-link") || {}).href || ""`)
	if href != "https://trace.example/trace/"+traceID {
		t.Errorf("trace link %q", href)
	}

	// A DAG of three levels in a 1400x900 window: at 100% its last
	// formula's last node is out of view; fit brings it in.
	wide, code := s.submit(wideComposition(s))
	if code != "" || wide.Status != "accepted" {
		t.Fatalf("submit: %s %v", code, wide.Errors)
	}
	if doc := s.wait(wide.WorkflowID, 60*time.Second); doc.Status != "succeeded" {
		t.Fatalf("wide: %s %s", doc.Status, doc.Error)
	}
	if err := navigate(tctx, base+"/w/"+wide.WorkflowID, chromedp.WaitVisible(`#dag-wrap[data-drawn="1"]`), chromedp.Click(`#zoom-reset`)); err != nil {
		t.Fatalf("DAG: %v", err)
	}
	waitJS(t, tctx, "zoom 100%", `document.getElementById("dag-wrap").dataset.zoom === "1.000"`, 10*time.Second)
	at100 := evalJS[lastNodeBox](t, tctx, lastNode)
	if at100.visible() {
		t.Fatalf("at 100%% the last node %s is in view already (%+v): the window is not too small for this DAG", at100.Node, at100)
	}
	if err := chromedp.Do(tctx, chromedp.Click(`#zoom-fit`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tctx, "fitted", `+document.getElementById("dag-wrap").dataset.zoom < 1`, 10*time.Second)
	fitted := evalJS[lastNodeBox](t, tctx, lastNode)
	if !fitted.visible() {
		t.Errorf("after fit the last node %s is not in view: %+v", fitted.Node, fitted)
	}
	t.Logf("last node %s: at 100%% %+v; fitted at %.0f%% %+v", at100.Node, at100.N, fitted.Zoom*100, fitted.N)
	// Ctrl + wheel zooms in.
	evalJS[bool](t, tctx, `document.getElementById("dag-wrap").dispatchEvent(new WheelEvent("wheel", {deltaY: -200, ctrlKey: true, clientX: 400, clientY: 400, bubbles: true, cancelable: true}))`)
	if z := evalJS[lastNodeBox](t, tctx, lastNode).Zoom; z <= fitted.Zoom {
		t.Errorf("ctrl+wheel: zoom %.3f, was %.3f", z, fitted.Zoom)
	}

	// A node's whole output: as text, markup and all; and as a download.
	resp, err := http.Get(base + "/api/workflows/" + id + "/output/database/config")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || !strings.Contains(string(text), "<script>window.__xss=1</script><img src=x onerror=window.__xss=2>\n") ||
		!strings.Contains(string(text), "warning: defaults used\n") {
		t.Errorf("output as text: %s %q", resp.Header.Get("Content-Type"), text)
	}
	resp, err = http.Get(base + "/api/workflows/" + id + "/output/database/config?download=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment;") {
		t.Errorf("download: %v", resp.Header)
	}
	if err := navigate(tctx, base+"/w/"+id+"#node=database%2Fconfig", chromedp.Click(`#node-output-page`),
		chromedp.WaitVisible(`#out-lines[data-lines]`)); err != nil {
		t.Fatalf("the full output page: %v", err)
	}
	type outPage struct {
		Text     string `json:"text"`
		Elements int    `json:"elements"`
		XSS      any    `json:"xss"`
		Download string `json:"download"`
	}
	op := evalJS[outPage](t, tctx, `({text: document.getElementById("out-lines").textContent, elements: document.querySelectorAll("#out-lines *:not(span), img").length,
	  xss: window.__xss === undefined ? null : window.__xss, download: document.getElementById("out-download").getAttribute("href")})`)
	if !strings.Contains(op.Text, "<script>window.__xss=1</script><img src=x onerror=window.__xss=2>") || op.Elements != 0 || op.XSS != nil ||
		op.Download != "/api/workflows/"+id+"/output/database/config?download=1" {
		t.Errorf("the full output page: %+v", op)
	}

	// A check run of the same composition: its nodes have no check, so
	// each would change. The page does not call that a plain success.
	check := strings.Replace(string(webviewComposition(s)), `{"name": "webview",`, `{"name": "webview", "operation": "check",`, 1)
	cr, code := s.submit([]byte(check))
	if code != "" || cr.Status != "accepted" {
		t.Fatalf("submit the check: %s %v", code, cr.Errors)
	}
	if doc := s.wait(cr.WorkflowID, 90*time.Second); doc.Status != "succeeded" {
		t.Fatalf("check run: %s %s", doc.Status, doc.Error)
	}
	if err := navigate(tctx, base+"/w/"+cr.WorkflowID, chromedp.WaitVisible(`#wf-state[data-verdict="changes"]`)); err != nil {
		t.Fatalf("the check run's page: %v", err)
	}
	if b := evalJS[string](t, tctx, `document.getElementById("wf-state").textContent`); b != "changes found" {
		t.Errorf("check run's badge %q", b)
	}

	// The host's page, opened from the run's DAG.
	if err := navigate(tctx, base+"/w/"+id, chromedp.WaitVisible(`a.fhost[data-host="`+h0+`"]`), chromedp.Click(`a.fhost[data-host="`+h0+`"]`),
		chromedp.WaitVisible(`#host-nodes tr[data-node]`)); err != nil {
		t.Fatalf("the host's page: %v", err)
	}
	type hostRow struct {
		Node, State, InPlace, Check string
	}
	rows := evalJS[[]hostRow](t, tctx, `[...document.querySelectorAll("#host-nodes tr[data-node]")].map((r) => ({Node: r.dataset.node, State: r.dataset.state,
	  InPlace: r.dataset.inPlace, Check: r.lastChild.textContent}))`)
	var got []string
	for _, r := range rows {
		got = append(got, r.Node)
		if r.State != "succeeded" || r.InPlace != "yes" || strings.HasPrefix(r.Node, "webview/") != strings.Contains(r.Check, "would change") {
			t.Errorf("host %s, node %+v: want succeeded, in place, and webview's check would change", h0, r)
		}
	}
	want := []string{"webview/base/packages", "webview/base/users", "webview/database/config", "webview/database/install", "webview/database/start",
		"wide/packages/configure-packages", "wide/packages/download-packages", "wide/packages/install-packages", "wide/packages/verify-packages"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("host %s lists %v, want %v", h0, got, want)
	}
	if p := evalJS[string](t, tctx, `location.pathname`); p != "/h/"+h0 {
		t.Errorf("host page at %s", p)
	}
	shoot(t, tctx, "webview-host.png", true)

	// The list: the check run marked; filters from the address and the
	// search box narrow it, and the address keeps them.
	h := s.fleet.Hosts[0]
	other := fmt.Sprintf(`{"name": "other", "hosts": {%q: {"address": %q, "user": %q}}, "formulas": [{"id": "one", "server": %q, "nodes": [{"name": "n", "run": "true"}]}]}`,
		h.Name, h.Addr, s.fleet.User, h.Name)
	or, code := s.submit([]byte(other))
	if code != "" || or.Status != "accepted" {
		t.Fatalf("submit: %s %v", code, or.Errors)
	}
	s.wait(or.WorkflowID, 60*time.Second)
	const count = `document.querySelectorAll("#runs tr[data-workflow]").length`
	if err := navigate(tctx, base+"/", chromedp.WaitVisible(`tr[data-workflow="`+or.WorkflowID+`"][data-state="succeeded"]`)); err != nil {
		t.Fatalf("list: %v", err)
	}
	if n := evalJS[int](t, tctx, count); n != 4 {
		t.Errorf("%d rows, want 4", n)
	}
	if b := evalJS[string](t, tctx, `document.querySelector('tr[data-workflow="`+cr.WorkflowID+`"][data-verdict="changes"] .badge').textContent`); b != "changes found" {
		t.Errorf("the check run's row says %q", b)
	}
	if err := chromedp.Do(tctx, chromedp.SendKeys(`#f-q`, "oth")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tctx, "the search narrows the list to other", count+` === 1 && !!document.querySelector('tr[data-workflow="`+or.WorkflowID+`"]') && location.search === "?q=oth"`, 10*time.Second)
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"?state=changes", []string{cr.WorkflowID}},
		{"?composition=webview", []string{cr.WorkflowID, id}},
		{"?composition=webview&state=succeeded", []string{id}},
		{"?submitter=operator&q=" + or.WorkflowID[:13], []string{or.WorkflowID}},
		{"?submitter=nobody", nil},
	} {
		if err := navigate(tctx, base+"/"+c.query, chromedp.WaitVisible(`#conn[data-conn="live"]`)); err != nil {
			t.Fatal(err)
		}
		ids := evalJS[[]string](t, tctx, `[...document.querySelectorAll("#runs tr[data-workflow]")].map((r) => r.dataset.workflow)`)
		if strings.Join(ids, " ") != strings.Join(c.want, " ") {
			t.Errorf("list %s shows %v, want %v", c.query, ids, c.want)
		}
	}
	if m := evalJS[string](t, tctx, `document.querySelector("#runs tr.none").textContent`); m != "No workflow matches the filter." {
		t.Errorf("empty filtered list says %q", m)
	}
}
