package sshexec

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
)

func TestZZUnwritableAttempts(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "afile")
			os.WriteFile(file, []byte("x"), 0o600)
			res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w1.1.create.f.n.1.run", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": filepath.Join(file, "attempts")}, Script: "echo hi"}})
			t.Logf("res exit %d stdout %q stderr (%d bytes) %q err %v", res.ExitCode, res.Stdout, len(res.Stderr), res.Stderr[:min(len(res.Stderr), 400)], err)
		})
	}
}
