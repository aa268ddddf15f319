package cli

import (
	"net"
	"net/http/httptest"
	"strings"
	"testing"
)

// The web view's address is printed as a browser takes it: an address of
// every interface as 127.0.0.1 (with how other machines reach it), IPv6
// in brackets.
func TestWebViewURLIsPasteable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr   *net.TCPAddr
		want   string
		others bool
	}{
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://127.0.0.1:8080/", true},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "http://127.0.0.1:8080/", true},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, "http://127.0.0.1:9/", false},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 9}, "http://[::1]:9/", false},
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 80}, "http://10.0.0.5:80/", false},
	} {
		if got := pasteableURL(c.addr, c.addr); got != c.want {
			t.Errorf("%s: %s, want %s", c.addr, got, c.want)
		}
		if o := otherMachinesURL(c.addr); c.others != strings.HasPrefix(o, " (from another machine: http://") {
			t.Errorf("%s: other machines: %q", c.addr, o)
		}
	}
}

// gantry ui serves the web view's metrics, the build's and the process's,
// and none of the services' whose packages the binary links but does not
// run (they would read 0).
func TestUIMetricsAreTheWebViewsOwn(t *testing.T) {
	rec := httptest.NewRecorder()
	uiMetrics().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{"gantry_webview_streams", "gantry_build_info{", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, not := range []string{"gantry_ssh_", "gantry_node_duration_seconds", "gantry_consumer_", "gantry_storage_"} {
		if strings.Contains(body, not) {
			t.Errorf("/metrics serves %s*, a service's metric this process does not run", not)
		}
	}
}
