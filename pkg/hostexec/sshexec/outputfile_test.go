package sshexec

import (
	"context"
	"errors"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// outputWriter writes values to $GANTRY_OUTPUT, a multi-line one and one
// that is no text at all, and prints nothing of them.
func outputWriter(dir, attempt string) hostexec.Attempt {
	return hostexec.Attempt{ID: attempt, Output: true, Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir},
		Script: `printf 'a=1\nca<<EOF\nline 1\n\nline 3\nEOF\n' >>"$GANTRY_OUTPUT"; printf 'raw=\001\377\n' >>"$GANTRY_OUTPUT"; echo done`}}
}

const wantOutput = "a=1\nca<<EOF\nline 1\n\nline 3\nEOF\nraw=\001\377\n"

// checkOutputRead runs outputWriter on r and reads its file back, whole,
// cut at a limit, and for an attempt that never ran.
func checkOutputRead(t *testing.T, r hostexec.AttemptRunner, cmd hostexec.Attempt) {
	t.Helper()
	ctx := context.Background()
	res, err := r.RunAttempt(ctx, cmd)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v, exit %d, stderr %q", err, res.ExitCode, res.Stderr)
	}
	got, err := hostexec.ReadOutput(ctx, r, cmd, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != wantOutput {
		t.Fatalf("read back %q, want %q", got, wantOutput)
	}
	if got, err := hostexec.ReadOutput(ctx, r, cmd, 4); err != nil || string(got) != wantOutput[:5] {
		t.Fatalf("read back with a limit of 4: %q, %v; want the first 5 bytes", got, err)
	}
	other := cmd
	other.ID += "x"
	if _, err := hostexec.ReadOutput(ctx, r, other, 1000); !errors.Is(err, hostexec.ErrNoOutputFile) {
		t.Fatalf("an attempt that never ran: %v, want ErrNoOutputFile", err)
	}
	// A run again of the attempt re-attaches, and finds the file as it was.
	if res, err := r.RunAttempt(ctx, cmd); err != nil || res.ExitCode != 0 {
		t.Fatalf("re-attach: %v, %d", err, res.ExitCode)
	}
	if got, err := hostexec.ReadOutput(ctx, r, cmd, 1000); err != nil || string(got) != wantOutput {
		t.Fatalf("after a re-attach: %q, %v", got, err)
	}
}

func TestOutputFileOverSSH(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	t.Run("agent", func(t *testing.T) {
		checkOutputRead(t, r, outputWriter(t.TempDir(), "w1.1.create.f.n.1.run"))
	})
	t.Run("session", func(t *testing.T) {
		checkOutputRead(t, sessionSupervised(r), outputWriter(t.TempDir(), "w1.1.create.f.n.2.run"))
	})
}

func TestOutputFileLocal(t *testing.T) {
	t.Parallel()
	checkOutputRead(t, localexec.Local{}, outputWriter(t.TempDir(), "w1.1.create.f.n.1.run"))
}
