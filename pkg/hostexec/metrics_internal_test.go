package hostexec

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestDialResult(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{fmt.Errorf("%w as root@h: no key", ErrAuth), "auth"},
		{fmt.Errorf("%w: h offers an unknown key", ErrHostKeyUnknown), "host_key"},
		{fmt.Errorf("%w: h", ErrHostKeyChanged), "host_key"},
		{fmt.Errorf("%w to h: %w", ErrConnect, context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("%w to h: %w", ErrConnect, context.Canceled), "cancelled"},
		{fmt.Errorf("%w to h: connection refused", ErrConnect), "error"},
		{errors.New("other"), "error"},
	} {
		if got := dialResult(c.err); got != c.want {
			t.Errorf("dialResult(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
