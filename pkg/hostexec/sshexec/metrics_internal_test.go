package sshexec

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
)

func TestDialResult(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{fmt.Errorf("%w as root@h: no key", hostexec.ErrAuth), "auth"},
		{fmt.Errorf("%w: h offers an unknown key", hostexec.ErrHostKeyUnknown), "host_key"},
		{fmt.Errorf("%w: h", hostexec.ErrHostKeyChanged), "host_key"},
		{fmt.Errorf("%w to h: %w", hostexec.ErrConnect, context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("%w to h: %w", hostexec.ErrConnect, context.Canceled), "cancelled"},
		{fmt.Errorf("%w to h: connection refused", hostexec.ErrConnect), "error"},
		{errors.New("other"), "error"},
	} {
		if got := dialResult(c.err); got != c.want {
			t.Errorf("dialResult(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
