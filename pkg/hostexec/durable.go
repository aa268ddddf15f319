package hostexec

import (
	"errors"

	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// ErrLost: an attempt's command ended on the host without recording an
// exit status (it was killed outside gantry, or the host restarted).
var ErrLost = errors.New("attempt lost on the host")

// attemptsBase is the shell that sets _gb to cmd's attempts directory on
// its host, before anything of cmd (its Env, its secrets) is in the
// shell's environment: GANTRY_ATTEMPTS of cmd.Env, else of the host's
// environment, else .gantry/attempts in cmd.Env's HOME, else in the
// host's. A secret never moves it (whatever its name: it is the command's
// business, not the supervisor's). It sets _gH, the home it started from.
func attemptsBase(cmd Command) string {
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
