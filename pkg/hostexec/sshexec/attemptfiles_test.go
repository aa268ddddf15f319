package sshexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// An attempt whose files cannot be made on the host (its attempts
// directory under a regular file) fails at once with ErrAttemptFiles,
// naming the directory and why, and starts nothing: not a wait for a
// claim nobody made, ended as a lost attempt with a shell complaining
// about the missing run file in its stderr.
func TestAttemptFilesThatCannotBeMade(t *testing.T) {
	rs := runners(t)
	rs["ssh, a session's supervisor"] = sessionSupervised(rs["ssh"])
	for name, r := range rs {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "afile")
			if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			ran := filepath.Join(dir, "ran")
			attempts := filepath.Join(file, "attempts")
			res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w1.1.create.f.n.1.run",
				Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": attempts}, Script: "echo >" + ran}})
			if !errors.Is(err, hostexec.ErrAttemptFiles) || !strings.Contains(err.Error(), file) {
				t.Fatalf("err %v (result %+v), want ErrAttemptFiles naming %s", err, res, file)
			}
			if strings.Contains(res.Stderr, "cannot open") || strings.Count(res.Stderr, "\n") > 1 {
				t.Errorf("stderr %q: want the one line that says why", res.Stderr)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Error("the command ran")
			}
		})
	}
}

// A command of its own that exits with the status the supervisor gives
// an attempt without files (253) or a lost one (254) is its own failure,
// with that status: not taken for ErrAttemptFiles or ErrLost.
func TestCommandExitingTheSupervisorsStatusesIsItsOwnFailure(t *testing.T) {
	rs := runners(t)
	rs["ssh, a session's supervisor"] = sessionSupervised(rs["ssh"])
	for name, r := range rs {
		t.Run(name, func(t *testing.T) {
			for _, code := range []int{253, 254} {
				attempts := filepath.Join(t.TempDir(), "attempts")
				a := hostexec.Attempt{ID: fmt.Sprintf("w1.1.create.f.n.%d.run", code), Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": attempts}, Script: fmt.Sprintf("echo why >&2; exit %d", code)}}
				for _, what := range []string{"run", "read again (a re-attach)"} {
					res, err := r.RunAttempt(context.Background(), a)
					if err != nil || res.ExitCode != code || res.Stderr != "why\n" {
						t.Fatalf("exit %d, %s: result %+v, err %v; want exit %d with its own stderr, no error", code, what, res, err, code)
					}
				}
			}
		})
	}
}
