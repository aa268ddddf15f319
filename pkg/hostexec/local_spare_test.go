package hostexec

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// inodes maps the inode of each file in dir to its name.
func inodes(t *testing.T, dir string) map[uint64]string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[uint64]string{}
	for _, e := range es {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[fi.Sys().(*syscall.Stat_t).Ino] = e.Name()
	}
	return out
}

// A local attempt's files are spare files made ahead of need, renamed into
// place; the attempt makes new spares while its command runs and returns
// once they are made, so nothing writes in the attempts directory after.
func TestAttemptFilesAreSpares(t *testing.T) {
	base := filepath.Join(t.TempDir(), "attempts")
	run := func(id string) {
		t.Helper()
		res, err := Local{}.Run(context.Background(), Command{Attempt: id, Lock: "c.f.n", Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "echo out; echo err >&2"})
		if err != nil || res.ExitCode != 0 || res.Stdout != "out\n" || res.Stderr != "err\n" {
			t.Fatalf("%s: %+v %v", id, res, err)
		}
	}
	run("w.1.create.f.n.1.run") // no spares yet: its files are created, and it makes spares
	spare := inodes(t, filepath.Join(base, ".spare"))
	if len(spare) != sparesPerDir {
		t.Fatalf("%d spare files after the first attempt, want %d", len(spare), sparesPerDir)
	}
	run("w.1.create.f.n.2.run")
	for _, suffix := range []string{".run", ".out", ".err"} {
		fi, err := os.Stat(filepath.Join(base, "w.1.create.f.n.2.run"+suffix))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := spare[fi.Sys().(*syscall.Stat_t).Ino]; !ok {
			t.Fatalf("%s is not one of the spare files", suffix)
		}
		if time.Since(fi.ModTime()) > time.Minute {
			t.Fatalf("%s keeps its spare's time %s", suffix, fi.ModTime())
		}
	}
	after := inodes(t, filepath.Join(base, ".spare"))
	time.Sleep(50 * time.Millisecond)
	if later := inodes(t, filepath.Join(base, ".spare")); len(after) != sparesPerDir || len(later) != len(after) {
		t.Fatalf("spares: %d when the attempt returned, %d later; want %d both times", len(after), len(later), sparesPerDir)
	}
}

// Renaming a spare into place claims the attempt only when its run file
// is not there: an attempt started before is never replaced, and the
// spare is kept.
func TestSpareNeverReplacesAClaim(t *testing.T) {
	base := filepath.Join(t.TempDir(), "attempts")
	if _, err := (Local{}).Run(context.Background(), Command{Attempt: "w.1.create.f.n.1.run", Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "true"}); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(base, "w.1.create.f.n.2.run.run")
	if err := os.WriteFile(run, []byte("123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := inodes(t, filepath.Join(base, ".spare"))
	if err := claimAttempt(base, "w.1.create.f.n.2.run"); err != errClaimed {
		t.Fatalf("claim over an existing run file: %v, want errClaimed", err)
	}
	if b, _ := os.ReadFile(run); string(b) != "123\n" {
		t.Fatalf("run file now %q", b)
	}
	d := spareDirOf(base)
	d.mu.Lock()
	kept := len(d.names)
	d.mu.Unlock()
	if after := inodes(t, filepath.Join(base, ".spare")); len(after) != len(before) || kept != len(before) {
		t.Fatalf("spares %d on disk and %d in hand after the refused claim, want %d", len(after), kept, len(before))
	}
	if err := claimAttempt(base, "w.1.create.f.n.3.run"); err != nil {
		t.Fatalf("a free attempt: %v", err)
	}
}
