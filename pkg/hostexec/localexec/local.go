// Package localexec is the local runner of hostexec: Local runs a
// command with /bin/sh on this machine, in a process group of its own with
// a small environment rather than the worker's.
package localexec

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// Local runs commands on this machine with /bin/sh, as the worker's own
// user, each in its own process group so a timeout kills everything it
// started, and with a small environment of its own (WorkerEnv.environ),
// not the worker's. Its zero value is ready to use.
type Local struct {
	// Worker is what a command's environment keeps of the worker's own
	// (zero: a default PATH and the worker user's home directory).
	Worker WorkerEnv
}

// The runner of transport local is an AttemptRunner.
var _ hostexec.AttemptRunner = Local{}

// Run runs the plain cmd on this machine.
func (l Local) Run(ctx context.Context, cmd hostexec.Command) (hostexec.Result, error) {
	if err := becomeLocal(cmd); err != nil {
		return hostexec.Result{ExitCode: -1, Started: time.Now()}, err
	}
	ex, err := cmdrun.CheckedExports(cmd)
	if err != nil {
		return hostexec.Result{ExitCode: -1, Started: time.Now()}, err
	}
	return l.runShell(ctx, cmd, localShell{text: ex + cmd.Script})
}

// RunAttempt runs a on this machine as a durable attempt (runAttempt:
// local_durable.go); one that was started before is re-attached to by the
// session supervisor's script.
func (l Local) RunAttempt(ctx context.Context, a hostexec.Attempt) (hostexec.Result, error) {
	res := hostexec.Result{ExitCode: -1, Started: time.Now()}
	if err := becomeLocal(a.Command); err != nil {
		return res, err
	}
	if a.Stdin != nil {
		return res, cmdrun.ErrStdinDurable
	}
	if err := cmdrun.CheckIDs(a); err != nil {
		return res, err
	}
	base, err := l.attemptsDir(a.Command)
	if err != nil {
		return res, err
	}
	res, err = l.runAttempt(ctx, a, base)
	if !errors.Is(err, cmdrun.ErrClaimed) {
		return res, err
	}
	a.BeforeStart = nil // called: the supervisor's script re-attaches
	ex, err := cmdrun.CheckedExports(a.Command)
	if err != nil {
		return res, err
	}
	lock := takeLock(a, base)
	if lock != nil {
		defer lock.Close() // the command holds it from its start on
	}
	sv := cmdrun.SupervisionOf(a, ex, false)
	sv.Base, sv.Held = "_gb="+hostsh.Quote(base), lock != nil
	return l.runShell(ctx, a.Command, localShell{text: hostsh.SuperviseScript(sv), lock: lock, attempt: a.ID})
}

// localShell is what runShell starts for a command: /bin/sh -c text and,
// for a durable attempt's session supervisor, the attempt (its first
// output line names its process group, a cancel ends its session, and its
// lost exit status is ErrLost) and the host lock it inherits on fd 3
// (nil: none).
type localShell struct {
	text    string
	attempt string
	lock    *os.File
}

// runShell runs sh for cmd (its environment, secrets, stdin, output and
// timeout) in a process group of its own, which a timeout or cancel ends.
func (l Local) runShell(ctx context.Context, cmd hostexec.Command, sh localShell) (hostexec.Result, error) {
	res := hostexec.Result{ExitCode: -1, Started: time.Now()}
	rctx, cancel := cmdrun.RunContext(ctx, cmd.Timeout)
	defer cancel()
	lock := sh.lock
	pgid := make(chan hostsh.Marked, 1)
	mask := cmdrun.NewMasker(cmd.Secrets, cmd.Mask...)
	out := &cmdrun.Output{Stream: hostexec.Stdout, OnLine: cmd.OnLine, Mask: mask}
	if sh.attempt != "" {
		out.Marker, out.OnMarker = hostsh.PIDMarker, hostsh.MarkerSink(pgid)
	}
	errOut := &cmdrun.Output{Stream: hostexec.Stderr, OnLine: cmd.OnLine, Mask: mask}
	c := exec.Command("/bin/sh", "-c", sh.text)
	c.Stdout, c.Stderr = out, errOut
	c.Stdin = cmd.Stdin // nil: /dev/null
	c.Env = l.Worker.environ(cmd.Secrets)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.WaitDelay = cmdrun.KillGrace
	if lock != nil {
		c.ExtraFiles = []*os.File{lock} // fd 3
	}
	if err := cmdrun.BeforeStart(cmd); err != nil {
		return res, err
	}
	if err := c.Start(); err != nil {
		return res, fmt.Errorf("start /bin/sh: %w", err)
	}
	if lock != nil {
		lock.Close() // the command's copy holds it now
	}
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-rctx.Done():
		kerr := l.killAttempt(sh.attempt, pgid, waited)
		killGroup(c.Process.Pid, waited)
		werr = errors.Join(cmdrun.EndErr(rctx), kerr)
		<-waited
	}
	out.Flush()
	errOut.Flush()
	res.Ended, res.Stdout, res.Stderr = time.Now(), out.String(), errOut.String()
	var ee *exec.ExitError
	switch {
	case werr == nil:
		res.ExitCode = 0
	case errors.Is(werr, exec.ErrWaitDelay) && rctx.Err() == nil:
		// The shell exited 0 and something it left running kept its
		// output open past KillGrace: the status stands, the rest of the
		// output is not waited for.
		res.ExitCode = 0
		res.Stderr += OutputCut + "\n"
	case errors.As(werr, &ee) && ee.Exited():
		res.ExitCode = ee.ExitCode()
		if sh.attempt != "" && hostsh.Lost(res.ExitCode, res.Stderr) {
			return res, fmt.Errorf("%w: %s on this machine", hostexec.ErrLost, sh.attempt)
		}
		if why, ok := hostsh.NoFiles(res.ExitCode, res.Stderr); sh.attempt != "" && ok {
			return res, fmt.Errorf("%w: %s on this machine: %s", hostexec.ErrAttemptFiles, sh.attempt, why)
		}
	default:
		if rctx.Err() != nil {
			return res, cmdrun.EndErr(rctx)
		}
		return res, werr
	}
	return res, nil
}

// OutputCut ends the stderr of a command that exited 0 while a process it
// left running kept its output open: what that process prints later is
// not the command's.
const OutputCut = "gantry: the command ended; a process it left running kept its output open, and its output was not waited for"

// takeLock takes a durable command's host lock here, without waiting, so
// that its supervisor need not start flock (a program start per attempt):
// an open file description locked with flock(2) that the command inherits
// on fd 3 and holds until it ends, as flock(1) would. It returns nil when
// the lock is held elsewhere (the supervisor then waits for it with flock
// and says for whom), or cannot be taken here for any reason (the
// supervisor takes it as without this), or the locks directory (beside
// base, the attempts directory) is not there yet.
func takeLock(cmd hostexec.Attempt, base string) *os.File {
	if cmd.Lock == "" || hostsh.ValidAttempt(cmd.Lock) != nil {
		return nil
	}
	// not cleaned: ".." is resolved by the kernel, as the shell's is
	f, err := os.OpenFile(base+"/../locks/"+cmd.Lock, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil
	}
	return f
}

// WorkerEnv is what a local command's environment keeps of the worker's:
// what a shell and the usual tools expect. The rest of the worker's
// environment is the worker's business (the path of its SSH key, its
// NATS credentials), and the command may be anyone's. The service's main
// reads it from the process's environment (WorkerEnvOf); this package
// reads no environment of its own.
type WorkerEnv struct {
	Path string // "": defaultPath
	Home string // "": the home directory of the worker's user, from the user database
	Lang string // "": none
	User string // "": none
}

// WorkerEnvOf reads a WorkerEnv with lookup (os.LookupEnv in a process).
func WorkerEnvOf(lookup func(string) (string, bool)) WorkerEnv {
	get := func(k string) string { v, _ := lookup(k); return v }
	return WorkerEnv{Path: get("PATH"), Home: get("HOME"), Lang: get("LANG"), User: get("USER")}
}

// home is the HOME a local command gets.
func (w WorkerEnv) home() string {
	if w.Home != "" {
		return w.Home
	}
	if u, err := user.Current(); err == nil {
		return u.HomeDir
	}
	return ""
}

// defaultPath is a local command's PATH when the worker has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// environ is a local command's environment: PATH and HOME always, LANG
// and USER when the worker has them, and the command's secrets. The
// command's Env comes as exports in its text, as over SSH; its secrets
// come here, never in the text sh is given (its argv).
func (w WorkerEnv) environ(secrets map[string]string) []string {
	env := make([]string, 0, 4+len(secrets))
	path := w.Path
	if path == "" {
		path = defaultPath
	}
	env = append(env, "PATH="+path)
	if home := w.home(); home != "" {
		env = append(env, "HOME="+home)
	}
	if w.Lang != "" {
		env = append(env, "LANG="+w.Lang)
	}
	if w.User != "" {
		env = append(env, "USER="+w.User)
	}
	// a secret named like one of the above wins: exec keeps the last
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		env = append(env, k+"="+secrets[k])
	}
	return env
}

// killAttempt ends a durable attempt's own session (hostsh.KillScript); a plain
// command is in the group killGroup ends.
func (l Local) killAttempt(attempt string, pgid chan hostsh.Marked, waited chan error) error {
	if attempt == "" {
		return nil
	}
	var g hostsh.Marked
	select {
	case g = <-pgid:
	case err := <-waited:
		waited <- err
		return nil // ended by itself meanwhile
	case <-time.After(cmdrun.KillGrace):
		return fmt.Errorf("%w: attempt %s: its process group is unknown", hostexec.ErrKill, attempt)
	}
	kill := exec.Command("/bin/sh", "-c", hostsh.KillScript(g.PGID, g.Dir))
	kill.Env = l.Worker.environ(nil) // as the command's, not the worker's
	out, err := kill.Output()
	if strings.TrimSpace(string(out)) != "gone" {
		return fmt.Errorf("%w: process group %d: %s %v", hostexec.ErrKill, g.PGID, strings.TrimSpace(string(out)), err)
	}
	return nil
}

// killGroup sends SIGTERM to the process group, then SIGKILL after the
// grace period unless the leader has exited.
func killGroup(pgid int, waited chan error) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case err := <-waited:
		waited <- err
	case <-time.After(cmdrun.KillGrace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
