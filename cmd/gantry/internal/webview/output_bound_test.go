package webview_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/events"
)

// A node's full output as JSON stays within MaxOutputBytes whatever its
// lines hold: 2,000,000 empty lines (2 MiB by their text) were an 84 MB
// reply; lines of quotes and control characters grow when escaped. The
// reply says it was cut.
func TestOutputAsJSONIsBounded(t *testing.T) {
	for name, text := range map[string]string{"empty lines": "", "escaped text": strings.Repeat("\"\x01<", 20)} {
		t.Run(name, func(t *testing.T) {
			src := &memSource{doc: outputDoc()}
			l := logLine("base", "a", 1, events.Stdout, text)
			src.lines = make([]events.LogLine, 2_000_000)
			for i := range src.lines {
				src.lines[i] = l
			}
			srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/api/workflows/" + wfID + "/output/base/a?format=json")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			var reply webview.OutputReply
			if err := json.Unmarshal(body, &reply); err != nil || !reply.Cut || len(reply.Lines) == 0 {
				t.Fatalf("reply: %v, cut %t, %d lines", err, reply.Cut, len(reply.Lines))
			}
			if len(body) > webview.MaxOutputBytes+4096 {
				t.Errorf("the JSON reply is %d bytes, more than the %d it may be", len(body), webview.MaxOutputBytes)
			}
		})
	}
}

// At most MaxOutputReads full outputs are read at once: the next is
// answered 503 at once, and served again once one ends.
func TestOutputReadsAreBounded(t *testing.T) {
	src := &memSource{doc: outputDoc(), outputHeld: make(chan struct{})}
	src.lines = []events.LogLine{logLine("base", "a", 1, events.Stdout, "hello")}
	srv := httptest.NewServer((&webview.Server{Src: src}).Handler())
	defer srv.Close()
	url := srv.URL + "/api/workflows/" + wfID + "/output/base/a"
	var wg sync.WaitGroup
	codes := make(chan int, webview.MaxOutputReads)
	for range webview.MaxOutputReads {
		wg.Go(func() {
			resp, err := http.Get(url)
			if err == nil {
				resp.Body.Close()
				codes <- resp.StatusCode
			}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		src.mu.Lock()
		n := len(src.asked)
		src.mu.Unlock()
		if n == webview.MaxOutputReads {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reads under way", n, webview.MaxOutputReads)
		}
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("read %d while %d are: %d, want 503", webview.MaxOutputReads+1, webview.MaxOutputReads, resp.StatusCode)
	}
	close(src.outputHeld)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a held read ended %d", c)
		}
	}
	if resp, err := http.Get(url); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("once they ended: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
