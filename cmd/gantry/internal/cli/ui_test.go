package cli

import (
	"net"
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
