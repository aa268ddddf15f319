package hostexec

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// Outputs files. A durable command with Output gets GANTRY_OUTPUT in its
// environment: the path of a file made empty for its attempt, beside the
// attempt's other files (<attempt>.output), where it writes the values it
// hands on. ReadOutput reads it back once the attempt has ended, however
// often the attempt was re-attached to.

// ErrNoOutputFile: the attempt's outputs file is not on the host (the
// attempt did not start with Output, or its files were swept).
var ErrNoOutputFile = errors.New("the attempt's outputs file is not on the host")

// ReadOutput reads the outputs file of the attempt a (run with Output,
// ended) on r's host: at most limit+1 bytes, so that a caller can tell a
// file over limit. It runs one plain command as a's user (Become), finding
// the attempt's directory as a's supervisor did (from its Env and the
// host's environment: attemptsBase). The file travels as
// hex (od), so its bytes arrive as they are, whatever lines they make.
func ReadOutput(ctx context.Context, r Runner, a Attempt, limit int) ([]byte, error) {
	if err := hostsh.ValidAttempt(a.ID); err != nil {
		return nil, err
	}
	read := Command{
		Script: `_gf=` + hostsh.AttemptsDir + `/` + hostsh.Quote(a.ID) + `.output; [ -f "$_gf" ] || exit ` + strconv.Itoa(hostsh.NoOutputExit) +
			`; head -c ` + strconv.Itoa(limit+1) + ` "$_gf" | od -An -v -tx1`,
		Env: a.Env, Become: a.Become, BecomeUser: a.BecomeUser, Timeout: a.Timeout,
	}
	var (
		mu  sync.Mutex
		hx  strings.Builder
		bad error
	)
	read.OnLine = func(s Stream, line string) {
		if s != Stdout {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		hx.WriteString(strings.Join(strings.Fields(line), ""))
		if hx.Len() > 2*(limit+1) && bad == nil {
			bad = fmt.Errorf("the outputs file read back is larger than asked")
		}
	}
	res, err := r.Run(ctx, read)
	if err != nil {
		return nil, fmt.Errorf("read the outputs file: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	switch {
	case res.ExitCode == hostsh.NoOutputExit:
		return nil, ErrNoOutputFile
	case res.ExitCode != 0:
		return nil, fmt.Errorf("read the outputs file: exit status %d: %s", res.ExitCode, hostsh.BoundStderr(res.Stderr))
	case bad != nil:
		return nil, bad
	}
	data, err := hex.DecodeString(hx.String())
	if err != nil {
		return nil, fmt.Errorf("read the outputs file: %w", err)
	}
	return data, nil
}
