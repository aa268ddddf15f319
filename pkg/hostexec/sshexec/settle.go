package sshexec

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"golang.org/x/crypto/ssh"
)

// settle settles a durable attempt over SSH, in a session of its own.
func (r *sshRunner) settle(ctx context.Context, cmd hostexec.Attempt) (hostexec.Result, error) {
	res := hostexec.Result{ExitCode: -1, Started: time.Now()}
	if err := hostsh.ValidAttempt(cmd.ID); err != nil {
		return res, err
	}
	if _, err := cmdrun.CheckedExports(cmd.Command); err != nil {
		return res, err
	}
	c := r.entry()
	sess, _, err := r.slotSession(ctx, c, func() (*ssh.Session, *ssh.Client, error) { return r.session(ctx, c) })
	if err != nil {
		return res, err
	}
	defer func() { c.touch(); c.release() }()
	defer sess.Close()
	var out, errOut bytes.Buffer
	sess.Stdout, sess.Stderr, sess.Stdin = &out, &errOut, eofReader{}
	if err := sess.Start(becomeOf(cmd.Command).remote(hostsh.SettleScript(cmd.ID, cmdrun.AttemptsBase(cmd.Command)))); err != nil {
		return res, fmt.Errorf("%w on %s: start: %w", hostexec.ErrSession, r.address, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sess.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		_ = sess.Close()
		return res, cmdrun.EndErr(ctx)
	}
	got, err := cmdrun.Settled(cmd, r.address, out.Bytes(), errOut.Bytes(), err)
	got.Started = res.Started
	return got, err
}
