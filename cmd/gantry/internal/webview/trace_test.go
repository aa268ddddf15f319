package webview_test

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
)

const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"

func TestTraceIDOf(t *testing.T) {
	if got := webview.TraceIDOf(nil); got != "" {
		t.Errorf("no headers: %q", got)
	}
	for _, c := range []struct{ header, want string }{
		{"00-" + traceID + "-00f067aa0ba902b7-01", traceID},
		{"00-" + traceID + "-00f067aa0ba902b7-00", traceID},      // not sampled: still its trace
		{"01-" + traceID + "-00f067aa0ba902b7-01-more", traceID}, // a later version may add fields
		{"", ""},
		{"00-" + traceID + "-00f067aa0ba902b7-01-more", ""},             // version 00 has four
		{"ff-" + traceID + "-00f067aa0ba902b7-01", ""},                  // ff is invalid
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""}, // no trace
		{"00-" + traceID + "-0000000000000000-01", ""},                  // no span
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""}, // upper case
		{"00-" + traceID[:31] + "-00f067aa0ba902b7-01", ""},
		{"00-" + traceID + "-00f067aa0ba902b7", ""},
		{"00-<script>alert(1)</script>aaaaaaaaaa-00f067aa0ba902b7-01", ""},
	} {
		if got := webview.TraceIDOf(nats.Header{events.TraceParentHeader: {c.header}}); got != c.want {
			t.Errorf("TraceIDOf(%q) = %q, want %q", c.header, got, c.want)
		}
	}
}

func FuzzTraceIDOf(f *testing.F) {
	for _, s := range []string{"00-" + traceID + "-00f067aa0ba902b7-01", "", "ff-0-0-0", "00--" + traceID + "-01", "01-" + traceID + "-00f067aa0ba902b7-01-x-y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		id := webview.TraceIDOf(nats.Header{events.TraceParentHeader: {h}})
		if id == "" {
			return
		}
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" || strings.Trim(id, "0") == "" || !strings.Contains(h, id) {
			t.Fatalf("TraceIDOf(%q) = %q: not a trace id of the header", h, id)
		}
		if link := webview.TraceLink("https://jaeger.example/trace/{trace_id}", id); link != "https://jaeger.example/trace/"+id {
			t.Fatalf("link %q", link)
		}
	})
}

func TestCheckTraceURL(t *testing.T) {
	for _, c := range []struct {
		tmpl, problem string
	}{
		{"https://jaeger.example/trace/{trace_id}", ""},
		{"http://127.0.0.1:16686/trace/{trace_id}?uiEmbed=v0", ""},
		{"https://grafana.example/explore?left={\"queries\":[{\"query\":\"{trace_id}\"}]}", ""},
		{"https://jaeger.example/trace/", "has no {trace_id}"},
		{"javascript:alert('{trace_id}')", "want an http:// or https:// URL"},
		{"/trace/{trace_id}", "want an http:// or https:// URL"},
		{"https:///trace/{trace_id}", "want an http:// or https:// URL"},
		{"http://a b/{trace_id}", "is not a URL"},
	} {
		err := webview.CheckTraceURL(c.tmpl)
		if c.problem == "" && err != nil || c.problem != "" && (err == nil || !strings.Contains(err.Error(), c.problem) || !errors.Is(err, webview.ErrTraceURL)) {
			t.Errorf("CheckTraceURL(%q) = %v, want %q", c.tmpl, err, c.problem)
		}
	}
	if got := webview.TraceLink("javascript:alert('{trace_id}')", traceID); got != "" {
		t.Errorf("a javascript: template made the link %q", got)
	}
	if got := webview.TraceLink("https://j/trace/{trace_id}", "<b>"); got != "" {
		t.Errorf("a non-id made the link %q", got)
	}
}

// A run's page carries its trace id from its events' traceparent, and the
// link when the web view has a trace URL; none when the run has no trace.
func TestStreamTraceLink(t *testing.T) {
	for _, c := range []struct {
		name, trace, tmpl, wantID, wantURL string
	}{
		{"traced, with a template", traceID, "https://jaeger.example/trace/{trace_id}", traceID, "https://jaeger.example/trace/" + traceID},
		{"traced, no template", traceID, "", traceID, ""},
		{"untraced", "", "https://jaeger.example/trace/{trace_id}", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			acc := accepted(t)
			acc.TraceID = c.trace
			src := &memSource{live: make(chan webview.Item), history: []webview.Item{acc}}
			srv := httptest.NewServer((&webview.Server{Src: src, TraceURL: c.tmpl}).Handler())
			defer srv.Close()
			s, done := open(t, srv, "/api/workflows/"+wfID+"/events")
			defer done()
			ev, data := s.next(t)
			var snap webview.Snapshot
			if ev != "snapshot" || json.Unmarshal([]byte(data), &snap) != nil {
				t.Fatalf("%s %s", ev, data)
			}
			if snap.Header.TraceID != c.wantID || snap.Header.TraceURL != c.wantURL {
				t.Errorf("trace %q %q, want %q %q", snap.Header.TraceID, snap.Header.TraceURL, c.wantID, c.wantURL)
			}
		})
	}
}
