package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
)

// TestParseControlRequest: a bad body is named as a bad control request
// (not as a malformed event), with what a good one looks like.
func TestParseControlRequest(t *testing.T) {
	for _, tc := range []struct {
		verb, body string
		nodes      int
		want       string // "" when accepted
	}{
		{events.VerbCancel, "", 0, ""},
		{events.VerbRetry, `{"nodes":["a/n"]}`, 1, ""},
		{events.VerbRetry, `{"nodes":`, 0, `bad control request: the body is not JSON like {"nodes":["formula/node"]}`},
		{events.VerbRetry, `[1,2]`, 0, "bad control request: the body is not JSON"},
		{events.VerbPause, `{"nodes":["a/n"]}`, 0, "bad control request: nodes apply to retry only, not pause"},
	} {
		req, err := events.ParseControlRequest(tc.verb, []byte(tc.body))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %s: %v", tc.verb, tc.body, err)
		case tc.want == "" && len(req.Nodes) != tc.nodes:
			t.Errorf("%s %s: nodes %q", tc.verb, tc.body, req.Nodes)
		case tc.want != "" && (!errors.Is(err, events.ErrBadControl) || !strings.Contains(fmtErr(err), tc.want)):
			t.Errorf("%s %s: error %v, want %q", tc.verb, tc.body, err, tc.want)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
