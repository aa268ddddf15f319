package cmdrun

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// settled reads what a settle printed (stdout, stderr) into a result;
// werr is how the shell that ran it ended, where names the host.
func Settled(cmd hostexec.Attempt, where string, stdout, stderr []byte, werr error) (hostexec.Result, error) {
	res := hostexec.Result{ExitCode: -1, Ended: time.Now()}
	first, rest, _ := bytes.Cut(stdout, []byte("\n"))
	what, ok := strings.CutPrefix(string(first), hostsh.SettleMarker)
	if !ok {
		if werr == nil {
			werr = errors.New("no answer")
		}
		return res, fmt.Errorf("%w on %s: settle attempt %s: %w (%s)", hostexec.ErrSession, where, cmd.ID, werr, strings.TrimSpace(string(stderr)))
	}
	mask := NewMasker(cmd.Secrets, cmd.Mask...)
	res.Stdout, res.Stderr = maskTail(mask, rest), maskTail(mask, stderr)
	how, status, _ := strings.Cut(what, " ")
	switch how {
	case "absent":
		return res, fmt.Errorf("%w: %s on %s", hostexec.ErrNoAttempt, cmd.ID, where)
	case "lost":
		return res, fmt.Errorf("%w: %s on %s", hostexec.ErrLost, cmd.ID, where)
	case "alive":
		return res, fmt.Errorf("%w: attempt %s on %s: still running", hostexec.ErrKill, cmd.ID, where)
	}
	code, err := strconv.Atoi(status)
	if err != nil || (how != "ended" && how != "killed") {
		return res, fmt.Errorf("%w on %s: settle attempt %s: unexpected answer %q", hostexec.ErrSession, where, cmd.ID, what)
	}
	res.ExitCode = code
	if how == "killed" && code != 0 {
		return res, fmt.Errorf("%w: attempt %s killed on %s (exit status %d)", hostexec.ErrCancelled, cmd.ID, where, code)
	}
	return res, nil // it ended by itself (or recorded its success as it was killed)
}

// maskTail masks the secrets in a tail the settle read (the last
// hostsh.MaxTail bytes of an output file): each whole value, and, when the
// tail is as long as a cut one, the end of a value the cut began inside.
func maskTail(m *Masker, b []byte) string {
	if m != nil && len(b) >= hostsh.MaxTail {
		b = m.cutStart(b)
	}
	return MaskAll(m, b)
}

// maskAll masks the secrets in every line of b.
func MaskAll(m *Masker, b []byte) string {
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
