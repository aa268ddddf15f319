// Package cmdrun is what both runners of pkg/hostexec do with a Command
// or an Attempt around the shell text of hostsh: check it (its ids, env
// names and secrets), build the supervision of a durable attempt, collect
// its output lines with the secrets masked as ***, read back a settle, and
// end it by its context (timeout or cancel).
package cmdrun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// errStdinDurable: a durable command cannot take a stdin (it may be
// re-attached to, and its stdin is the supervisor's).
var ErrStdinDurable = errors.New("a durable command (Attempt) takes no Stdin")

// checkIDs checks a durable command's attempt id, and its lock and mark
// when it has them.
func CheckIDs(cmd hostexec.Attempt) error {
	if err := hostsh.ValidAttempt(cmd.ID); err != nil {
		return err
	}
	for what, id := range map[string]string{"lock": cmd.Lock, "mark": cmd.Mark} {
		if id == "" {
			continue
		}
		if err := hostsh.ValidAttempt(id); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// supervisionOf is the session supervisor of the durable cmd, ex being
// its Env's exports. stdinSecrets: its secrets travel on stdin (over
// SSH); otherwise they are in the environment the shell starts with.
func SupervisionOf(cmd hostexec.Attempt, ex string, stdinSecrets bool) hostsh.Supervision {
	sv := hostsh.Supervision{Attempt: cmd.ID, Lock: cmd.Lock, Mark: cmd.Mark, Base: AttemptsBase(cmd.Command), Run: ex + "eval " + hostsh.Quote(Script(cmd))}
	if stdinSecrets && len(cmd.Secrets) > 0 {
		sv.Read, sv.Run = hostsh.ReadSecretLine, hostsh.EvalSecrets+sv.Run
	}
	return sv
}

// asks says whether an attempt that holds its lock is to be asked
// before it starts (see Attempt.Turn).
func Asks(cmd hostexec.Attempt, h hostexec.Holder) bool {
	return h.Waited || (cmd.Turn != nil && cmd.Mark != "" && h.Mark == cmd.Mark && h.ExitCode == 0)
}

func BeforeStart(cmd hostexec.Command) error {
	if cmd.BeforeStart == nil {
		return nil
	}
	if err := cmd.BeforeStart(); err != nil {
		return fmt.Errorf("%w: %w", hostexec.ErrNotStarted, err)
	}
	return nil
}

// checkedExports is the export lines of cmd's Env, once its names and its
// secrets are checked.
func CheckedExports(cmd hostexec.Command) (string, error) {
	ex, err := hostsh.Exports(cmd.Env)
	if err != nil {
		return "", err
	}
	return ex, CheckSecrets(cmd)
}

// checkSecrets checks a command's secrets. Its errors name the variable,
// never the value.
func CheckSecrets(cmd hostexec.Command) error {
	for _, k := range slices.Sorted(maps.Keys(cmd.Secrets)) {
		v := cmd.Secrets[k]
		switch {
		case !dag.IsEnvName(k):
			return fmt.Errorf("secret name %q is not a valid environment variable name", k)
		case v == "":
			return fmt.Errorf("secret %s is empty", k)
		case strings.IndexByte(v, 0) >= 0:
			return fmt.Errorf("secret %s holds a NUL byte", k)
		}
		if _, ok := cmd.Env[k]; ok {
			return fmt.Errorf("%s is both an environment variable and a secret", k)
		}
	}
	return nil
}

// runContext applies the command timeout and says, after the fact, which
// of timeout or cancellation ended it.
func RunContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		return context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w after %s", hostexec.ErrTimeout, timeout))
	}
	return context.WithCancel(ctx)
}

// endErr is the error for a command ended by its context.
func EndErr(ctx context.Context) error {
	if c := context.Cause(ctx); c != nil && errors.Is(c, hostexec.ErrTimeout) {
		return c
	}
	return fmt.Errorf("%w: %w", hostexec.ErrCancelled, ctx.Err())
}

// attemptsBase is the shell that sets _gb to cmd's attempts directory on
// its host, before anything of cmd (its Env, its secrets) is in the
// shell's environment: GANTRY_ATTEMPTS of cmd.Env, else of the host's
// environment, else .gantry/attempts in cmd.Env's HOME, else in the
// host's. A secret never moves it (whatever its name: it is the command's
// business, not the supervisor's). It sets _gH, the home it started from.
func AttemptsBase(cmd hostexec.Command) string {
	home := `"$HOME"`
	if h, ok := cmd.Env["HOME"]; ok {
		home = hostsh.Quote(h)
	}
	base := `"${GANTRY_ATTEMPTS:-$_gH/.gantry/attempts}"`
	if v, ok := cmd.Env["GANTRY_ATTEMPTS"]; ok && v != "" {
		base = hostsh.Quote(v)
	} else if ok {
		base = `"$_gH/.gantry/attempts"`
	}
	return "_gH=" + home + "; _gb=" + base
}

// script is what a durable command's supervisor evaluates: its Script,
// after the making of its outputs file when it has Output.
func Script(cmd hostexec.Attempt) string {
	if !cmd.Output || cmd.ID == "" {
		return cmd.Script
	}
	return hostsh.OutputPrelude + cmd.Script
}

// WaitingLine is what an attempt that waits for its host lock says on its
// stderr: the attempt holding it.
func WaitingLine(holder string) string {
	return "gantry: waiting for " + holder + " on this host\n"
}

// ErrClaimed: the attempt's run file exists (it started before; over SSH,
// the agent answered "R").
var ErrClaimed = errors.New("the attempt was started before")

// KillGrace is how long a killed command gets between SIGTERM and SIGKILL.
const KillGrace = 2 * time.Second
