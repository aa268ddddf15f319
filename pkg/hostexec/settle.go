package hostexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"golang.org/x/crypto/ssh"
)

// Settling an attempt. A durable attempt outlives the worker that
// started it, so a worker may find an attempt recorded as running that
// nobody follows any more, in a run that has been cancelled meanwhile (or
// that a retry has superseded). Running the same Attempt again would
// re-attach to it, but would also start it if it never started there.
// Run with Command.Settle starts nothing: in one session it ends the
// attempt if it still runs, as a cancel does (SIGTERM, SIGKILL after 2
// s, confirmed; the kill's status, 143 or 137, recorded as the attempt's
// exit status), and says how the attempt ended:
//
//   - it had ended by itself: its recorded exit status, no error (an
//     attempt that succeeded while nobody followed it is a success);
//   - this call (or an earlier kill by gantry) killed it: the kill's
//     status and ErrCancelled;
//   - it never started on the host (or a cancel claimed it before it
//     started: see hostsh.CancelScript): ErrNoAttempt;
//   - it ended without recording an exit status: ErrLost;
//   - it could not be confirmed gone: ErrKill.
//
// Result.Stdout and Stderr are the last MaxTail bytes of its output
// files, with the command's secrets masked.

// ErrNoAttempt: a settled attempt never started on its host (it has no
// run file there).
var ErrNoAttempt = errors.New("the attempt never started on the host")

// settled reads what a settle printed (stdout, stderr) into a result;
// werr is how the shell that ran it ended, where names the host.
func settled(cmd Command, where string, stdout, stderr []byte, werr error) (Result, error) {
	res := Result{ExitCode: -1, Ended: time.Now()}
	first, rest, _ := bytes.Cut(stdout, []byte("\n"))
	what, ok := strings.CutPrefix(string(first), hostsh.SettleMarker)
	if !ok {
		if werr == nil {
			werr = errors.New("no answer")
		}
		return res, fmt.Errorf("%w on %s: settle attempt %s: %w (%s)", ErrSession, where, cmd.Attempt, werr, strings.TrimSpace(string(stderr)))
	}
	mask := newMasker(cmd.Secrets, cmd.Mask...)
	res.Stdout, res.Stderr = maskAll(mask, rest), maskAll(mask, stderr)
	how, status, _ := strings.Cut(what, " ")
	switch how {
	case "absent":
		return res, fmt.Errorf("%w: %s on %s", ErrNoAttempt, cmd.Attempt, where)
	case "lost":
		return res, fmt.Errorf("%w: %s on %s", ErrLost, cmd.Attempt, where)
	case "alive":
		return res, fmt.Errorf("%w: attempt %s on %s: still running", ErrKill, cmd.Attempt, where)
	}
	code, err := strconv.Atoi(status)
	if err != nil || (how != "ended" && how != "killed") {
		return res, fmt.Errorf("%w on %s: settle attempt %s: unexpected answer %q", ErrSession, where, cmd.Attempt, what)
	}
	res.ExitCode = code
	if how == "killed" && code != 0 {
		return res, fmt.Errorf("%w: attempt %s killed on %s (exit status %d)", ErrCancelled, cmd.Attempt, where, code)
	}
	return res, nil // it ended by itself (or recorded its success as it was killed)
}

// maskAll masks the secrets in every line of b.
func maskAll(m *masker, b []byte) string {
	if m == nil {
		return string(b)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	var out []byte
	for _, l := range lines {
		out = append(out, m.apply(l)...)
	}
	return string(out)
}

// settle settles a durable attempt over SSH, in a session of its own.
func (r *sshRunner) settle(ctx context.Context, cmd Command) (Result, error) {
	res := Result{ExitCode: -1, Started: time.Now()}
	if err := hostsh.ValidAttempt(cmd.Attempt); err != nil {
		return res, err
	}
	if _, err := checkedExports(cmd); err != nil {
		return res, err
	}
	c := r.entry()
	var (
		sess *ssh.Session
		err  error
	)
	for {
		if err := r.acquire(ctx, c); err != nil { // stay within the sessions the connection allows
			return res, err
		}
		sess, _, err = r.session(ctx, c)
		if errors.Is(err, errOverLimit) {
			continue // the slot went to the connection: wait for another
		}
		if err != nil {
			c.touch()
			c.release()
			return res, err
		}
		break
	}
	defer func() { c.touch(); c.release() }()
	defer sess.Close()
	var out, errOut bytes.Buffer
	sess.Stdout, sess.Stderr, sess.Stdin = &out, &errOut, eofReader{}
	if err := sess.Start(cmd.as().remote(hostsh.SettleScript(cmd.Attempt, attemptsBase(cmd)))); err != nil {
		return res, fmt.Errorf("%w on %s: start: %w", ErrSession, r.address, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sess.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		_ = sess.Close()
		return res, endErr(ctx)
	}
	got, err := settled(cmd, r.address, out.Bytes(), errOut.Bytes(), err)
	got.Started = res.Started
	return got, err
}

// settleLocal settles a durable attempt of transport local.
func settleLocal(ctx context.Context, cmd Command) (Result, error) {
	res := Result{ExitCode: -1, Started: time.Now()}
	if err := hostsh.ValidAttempt(cmd.Attempt); err != nil {
		return res, err
	}
	if _, err := checkedExports(cmd); err != nil {
		return res, err
	}
	base, err := localAttemptsDir(cmd)
	if err != nil {
		return res, err
	}
	c := exec.CommandContext(ctx, "/bin/sh", "-c", hostsh.SettleScript(cmd.Attempt, "_gb="+hostsh.Quote(base)))
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	c.Env = localEnv(nil)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.WaitDelay = KillGrace
	err = c.Run()
	if ctx.Err() != nil {
		return res, endErr(ctx)
	}
	got, err := settled(cmd, "this machine", out.Bytes(), errOut.Bytes(), err)
	got.Started = res.Started
	return got, err
}
