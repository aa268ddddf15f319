package localexec

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// spareInodes waits until base has sparesPerDir spare files ready (or
// more: one given back while more were made) and returns their inodes.
func spareInodes(t *testing.T, l Local, base string) []uint64 {
	t.Helper()
	d := l.pre.spares.dirOf(base)
	for range 500 {
		d.mu.Lock()
		var ino []uint64
		for _, f := range d.files {
			fi, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			ino = append(ino, fi.Sys().(*syscall.Stat_t).Ino)
		}
		d.mu.Unlock()
		if len(ino) >= sparesPerDir {
			return ino
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %d spare files in 5 s", sparesPerDir)
	return nil
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// A local attempt's files are spare files made ahead of need: unnamed
// files of its attempts directory, linked in when it starts. They leave
// nothing else in the directory.
func TestAttemptFilesAreSpares(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	base := filepath.Join(t.TempDir(), "attempts")
	run := func(id string) {
		t.Helper()
		res, err := l.Run(context.Background(), hostexec.Command{Attempt: id, Lock: "c.f.n", Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "echo out; echo err >&2"})
		if err != nil || res.ExitCode != 0 || res.Stdout != "out\n" || res.Stderr != "err\n" {
			t.Fatalf("%s: %+v %v", id, res, err)
		}
	}
	run("w.1.create.f.n.1.run") // no spares yet: its files are created, and spares are made
	spare := spareInodes(t, l, base)
	run("w.1.create.f.n.2.run")
	for _, suffix := range []string{".run", ".out", ".err", ".id"} {
		name := filepath.Join(base, "w.1.create.f.n.2.run"+suffix)
		if !slices.Contains(spare, inodeOf(t, name)) {
			t.Fatalf("%s is not one of the spare files", suffix)
		}
		if fi, _ := os.Stat(name); time.Since(fi.ModTime()) > time.Minute {
			t.Fatalf("%s keeps its spare's time %s", suffix, fi.ModTime())
		}
	}
	es, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	want := []string{".swept-" + hostsh.SweepDay(), "w.1.create.f.n.1.run.err", "w.1.create.f.n.1.run.id", "w.1.create.f.n.1.run.out", "w.1.create.f.n.1.run.run",
		"w.1.create.f.n.2.run.err", "w.1.create.f.n.2.run.id", "w.1.create.f.n.2.run.out", "w.1.create.f.n.2.run.run"}
	if !slices.Equal(names, want) {
		t.Fatalf("attempts directory %q, want %q", names, want)
	}
}

// Linking a spare in claims the attempt only when its run file is not
// there: an attempt started before is never replaced, and the spare is
// kept.
func TestSpareNeverReplacesAClaim(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	base := filepath.Join(t.TempDir(), "attempts")
	if _, err := l.Run(context.Background(), hostexec.Command{Attempt: "w.1.create.f.n.1.run", Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "true"}); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(base, "w.1.create.f.n.2.run.run")
	if err := os.WriteFile(run, []byte("123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := spareInodes(t, l, base)
	if err := l.claimAttempt(base, "w.1.create.f.n.2.run"); err != cmdrun.ErrClaimed {
		t.Fatalf("claim over an existing run file: %v, want errClaimed", err)
	}
	if b, _ := os.ReadFile(run); string(b) != "123\n" {
		t.Fatalf("run file now %q", b)
	}
	after := spareInodes(t, l, base)
	for _, ino := range before {
		if !slices.Contains(after, ino) {
			t.Fatalf("spares %v after the refused claim, want all of %v", after, before)
		}
	}
	if err := l.claimAttempt(base, "w.1.create.f.n.3.run"); err != nil {
		t.Fatalf("a free attempt: %v", err)
	}
	if !slices.Contains(before, inodeOf(t, filepath.Join(base, "w.1.create.f.n.3.run.run"))) {
		t.Fatal("the free attempt's run file is not a spare")
	}
}

// A spare that waited longer than the sweep's 7 days gives the attempt a
// run file of the time it is claimed: the day's sweep, right after the
// claim, does not remove the claim (the attempt could then be claimed,
// and started, a second time).
func TestOldSpareClaimSurvivesTheSweep(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	base := filepath.Join(t.TempDir(), "attempts")
	if _, err := l.Run(context.Background(), hostexec.Command{Attempt: "w.1.create.f.n.1.run", Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "true"}); err != nil {
		t.Fatal(err)
	}
	spareInodes(t, l, base)
	old := time.Now().Add(-8 * 24 * time.Hour)
	d := l.pre.spares.dirOf(base)
	d.mu.Lock()
	for _, f := range d.files { // the spares waited 8 days
		if err := os.Chtimes("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), old, old); err != nil {
			d.mu.Unlock()
			t.Fatal(err)
		}
	}
	d.mu.Unlock()
	stamps, _ := filepath.Glob(base + "/.swept-*")
	for _, p := range stamps { // a new day: the next attempt sweeps
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.claimAttempt(base, "w.1.create.f.n.2.run"); err != nil {
		t.Fatal(err)
	}
	sweepLocal(base) // as runLocalAttempt does after the claim
	if _, err := os.Stat(filepath.Join(base, "w.1.create.f.n.2.run.run")); err != nil {
		t.Fatalf("the claim was swept: %v", err)
	}
	if err := l.claimAttempt(base, "w.1.create.f.n.2.run"); err != cmdrun.ErrClaimed {
		t.Fatalf("second claim of the attempt: %v, want errClaimed", err)
	}
}

// An attempts directory removed while the worker holds spares of it is
// made again by the next attempt, and spares go on there.
func TestSparesGoOnInARemadeDirectory(t *testing.T) {
	l := NewLocal(LocalOptions{Prestart: true})
	base := filepath.Join(t.TempDir(), "attempts")
	run := func(id string) {
		t.Helper()
		if res, err := l.Run(context.Background(), hostexec.Command{Attempt: id, Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "true"}); err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v", id, res, err)
		}
	}
	run("w.1.create.f.n.1.run")
	spareInodes(t, l, base)
	if err := os.RemoveAll(base); err != nil {
		t.Fatal(err)
	}
	run("w.1.create.f.n.2.run")
	spare := spareInodes(t, l, base)
	run("w.1.create.f.n.3.run")
	if !slices.Contains(spare, inodeOf(t, filepath.Join(base, "w.1.create.f.n.3.run.run"))) {
		t.Fatal("after the directory was made again, the attempt's run file is not a spare")
	}
}

// A runner made with Prestart makes spare files after an attempt, for the
// next; one made without makes nothing ahead of need.
func TestPrestartOption(t *testing.T) {
	for _, on := range []bool{true, false} {
		l := NewLocal(LocalOptions{Prestart: on})
		if l.Prestarts() != on {
			t.Fatalf("Prestart %v: Prestarts() %v", on, l.Prestarts())
		}
		base := filepath.Join(t.TempDir(), "attempts")
		res, err := l.Run(context.Background(), hostexec.Command{Attempt: "w.1.create.f.n.1.run", Lock: "c.f.n", Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "echo ran"})
		if err != nil || res.Stdout != "ran\n" {
			t.Fatalf("Prestart %v: %+v %v", on, res, err)
		}
		if on {
			spareInodes(t, l, base) // made after the attempt, for the next
		}
	}
}
