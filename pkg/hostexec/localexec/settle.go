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

// settle settles a durable attempt of transport local.
func (l Local) settle(ctx context.Context, cmd hostexec.Command) (hostexec.Result, error) {
	res := hostexec.Result{ExitCode: -1, Started: time.Now()}
	if err := hostsh.ValidAttempt(cmd.Attempt); err != nil {
		return res, err
	}
	if _, err := cmdrun.CheckedExports(cmd); err != nil {
		return res, err
	}
	base, err := l.attemptsDir(cmd)
	if err != nil {
		return res, err
	}
	c := exec.CommandContext(ctx, "/bin/sh", "-c", hostsh.SettleScript(cmd.Attempt, "_gb="+hostsh.Quote(base)))
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	c.Env = l.Worker.environ(nil)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.WaitDelay = cmdrun.KillGrace
	err = c.Run()
	if ctx.Err() != nil {
		return res, cmdrun.EndErr(ctx)
	}
	got, err := cmdrun.Settled(cmd, "this machine", out.Bytes(), errOut.Bytes(), err)
	got.Started = res.Started
	return got, err
}
