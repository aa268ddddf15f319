package hostexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Local runs commands on this machine with /bin/sh, each in its own
// process group so a timeout kills everything it started.
type Local struct{}

// KillGrace is how long a killed command gets between SIGTERM and SIGKILL.
const KillGrace = 2 * time.Second

func (Local) Run(ctx context.Context, cmd Command) (Result, error) {
	res := Result{ExitCode: -1, Started: time.Now()}
	ex, err := exports(cmd.Env)
	if err != nil {
		return res, err
	}
	rctx, cancel := runContext(ctx, cmd.Timeout)
	defer cancel()
	out := &output{stream: Stdout, onLine: cmd.OnLine}
	errOut := &output{stream: Stderr, onLine: cmd.OnLine}
	c := exec.Command("/bin/sh", "-c", ex+cmd.Script)
	c.Stdout, c.Stderr = out, errOut
	c.Stdin = nil
	c.Env = os.Environ()
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.WaitDelay = KillGrace
	if err := beforeStart(cmd); err != nil {
		return res, err
	}
	if err := c.Start(); err != nil {
		return res, fmt.Errorf("start /bin/sh: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-rctx.Done():
		killGroup(c.Process.Pid, waited)
		werr = endErr(rctx)
		<-waited
	}
	out.flush()
	errOut.flush()
	res.Ended, res.Stdout, res.Stderr = time.Now(), out.String(), errOut.String()
	var ee *exec.ExitError
	switch {
	case werr == nil:
		res.ExitCode = 0
	case errors.As(werr, &ee) && ee.Exited():
		res.ExitCode = ee.ExitCode()
	default:
		if rctx.Err() != nil {
			return res, endErr(rctx)
		}
		return res, werr
	}
	return res, nil
}

// killGroup sends SIGTERM to the process group, then SIGKILL after the
// grace period unless the leader has exited.
func killGroup(pgid int, waited chan error) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case err := <-waited:
		waited <- err
	case <-time.After(KillGrace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
