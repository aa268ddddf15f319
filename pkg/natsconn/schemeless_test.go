package natsconn_test

import (
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/natsconn"
)

// A URL without a scheme (nats.go adds nats://, so it is a working form)
// whose password holds '/', '?' or '#': nats.go cannot parse it, and the
// error showed Redact's text, which left a scheme-less URL as it was,
// password and all.
func TestSchemelessURLPasswordNotShown(t *testing.T) {
	for _, tc := range []struct{ url, secret string }{
		{"gantry:S3c/retPW@127.0.0.1:1", "S3c/retPW"},
		{"gantry:S3c?retPW@127.0.0.1:1", "S3c?retPW"},
		{"gantry:S3c#retPW@127.0.0.1:1", "S3c#retPW"},
		{"gantry:hunter2pw@127.0.0.1:4222,gantry:S3c/retPW@127.0.0.1:1", "S3c/retPW"},
	} {
		_, err := natsconn.Connect(natsconn.Options{URL: tc.url}, "test", nil, false)
		if err == nil {
			t.Fatalf("%s: connected", tc.url)
		}
		if msg := err.Error(); strings.Contains(msg, tc.secret) || strings.Contains(msg, "hunter2pw") {
			t.Errorf("connect to %s: the error shows the password: %s", tc.url, msg)
		}
	}
	for _, u := range []string{"gantry:hunter2pw@127.0.0.1:4222", "hunter2pw@127.0.0.1:4222"} {
		if got := natsconn.Redact(u); strings.Contains(got, "hunter2pw") {
			t.Errorf("Redact(%q) = %q", u, got)
		}
	}
}
