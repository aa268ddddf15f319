package localexec

import (
	"bytes"
	"context"
	"os/exec"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// Settle settles the attempt a.ID on this machine (see
// hostexec.AttemptRunner.Settle): it starts nothing.
func (l Local) Settle(ctx context.Context, a hostexec.Attempt) (hostexec.Result, error) {
	res := hostexec.Result{ExitCode: -1, Started: time.Now()}
	if err := becomeLocal(a.Command); err != nil {
		return res, err
	}
	if err := hostsh.ValidAttempt(a.ID); err != nil {
		return res, err
	}
	if _, err := cmdrun.CheckedExports(a.Command); err != nil {
		return res, err
	}
	base, err := l.attemptsDir(a.Command)
	if err != nil {
		return res, err
	}
	c := exec.CommandContext(ctx, "/bin/sh", "-c", hostsh.SettleScript(a.ID, "_gb="+hostsh.Quote(base)))
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	c.Env = l.Worker.environ(nil)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.WaitDelay = cmdrun.KillGrace
	err = c.Run()
	if ctx.Err() != nil {
		return res, cmdrun.EndErr(ctx)
	}
	got, err := cmdrun.Settled(a, "this machine", out.Bytes(), errOut.Bytes(), err)
	got.Started = res.Started
	return got, err
}
