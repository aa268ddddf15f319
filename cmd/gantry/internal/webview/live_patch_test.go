package webview_test

import (
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A node whose first attempt failed (will retry) and whose second
// succeeded, watched live: the page must not keep showing the first
// attempt's error on the node (a reload does not show it).
func TestLivePatchClearsWhatTheNodeNoLongerSays(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s: %v (install Debian's chromium: apt-get install chromium)", chromium, err)
	}
	failed := &events.NodeEvent{Ref: ref("base", "h1", "a"), Status: dag.NodeFailed, WillRetry: true,
		Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t0, Error: "exit status 3"}}
	three := 3
	failed.ExitCode = &three
	src := &memSource{live: make(chan webview.Item, 10)}
	src.history = []webview.Item{accepted(t), node(t, "base", "a", dag.NodeRunning, 1), env(t, failed)}
	srv := httptest.NewServer((&webview.Server{Src: src, Lookback: time.Hour}).Handler())
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel2 := chromedp.NewContext(actx)
	defer cancel2()
	ctx, cancel3 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel3()

	panel := func() string {
		s, err := chromedp.Run(ctx, chromedp.TextContent("#panel dl.kv"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/w/"+wfID+"#node=base%2Fa"),
		chromedp.WaitVisible(`#panel dl.kv`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	t.Logf("panel while attempt 1 failed: %q", panel())
	src.live <- node(t, "base", "a", dag.NodeRunning, 2)
	src.live <- node(t, "base", "a", dag.NodeSucceeded, 2)
	time.Sleep(1500 * time.Millisecond)
	live := panel()
	t.Logf("panel live after attempt 2 succeeded: %q", live)
	kvLive := live
	badge, _ := chromedp.Run(ctx, chromedp.TextContent("#panel .ptitle .badge"))
	t.Logf("node badge live: %q", badge)
	if badge != "succeeded" {
		t.Fatalf("live events not applied: badge %q", badge)
	}
	if strings.Contains(kvLive, "exit status 3") {
		t.Errorf("the node's details, live, still say error exit status 3 after it succeeded: %q", kvLive)
	}
}
