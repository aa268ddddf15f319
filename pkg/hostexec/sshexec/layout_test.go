package sshexec

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// layoutRunners are the ways an attempt starts: the SSH host agent, the
// SSH session supervisor, and the local worker.
func layoutRunners(t *testing.T) map[string]hostexec.AttemptRunner {
	f := sshtest.Start(t, 1, sshtest.Options{})
	ssh := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	return map[string]hostexec.AttemptRunner{"ssh agent": ssh, "ssh session": sessionSupervised(ssh), "local": localexec.Local{}}
}

// An attempt's files are kept in a directory of the attempts directory
// named by its workflow (the id's first part), never in the attempts
// directory itself: a directory holds one workflow's attempts on the
// host. They are found there again: the attempt is re-attached to, not
// run twice, and its outputs file is read back.
func TestAttemptFilesInTheirWorkflowsDirectory(t *testing.T) {
	for name, r := range layoutRunners(t) {
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "attempts")
			marker := filepath.Join(t.TempDir(), "ran")
			a := hostexec.Attempt{ID: "wf7.1.create.f.n.1.run", Lock: "c.f.n", Output: true, Command: hostexec.Command{
				Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: `echo ran >>` + marker + `; echo v=1 >>"$GANTRY_OUTPUT"; echo out; echo err >&2`}}
			for i := range 2 {
				res, err := r.RunAttempt(context.Background(), a)
				if err != nil || res.ExitCode != 0 || res.Stdout != "out\n" || res.Stderr != "err\n" {
					t.Fatalf("run %d: %+v %v", i, res, err)
				}
			}
			if b, _ := os.ReadFile(marker); string(b) != "ran\n" {
				t.Fatalf("the command ran %q: want once", b)
			}
			exts := []string{".run", ".out", ".err", ".output"}
			if _, err := os.Stat("/proc/self/stat"); err == nil {
				exts = append(exts, ".id")
			}
			for _, ext := range exts {
				if p := filepath.Join(base, "wf7", a.ID+ext); !fileExists(p) {
					t.Errorf("%s is missing", p)
				}
			}
			entries, err := os.ReadDir(base)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if !e.IsDir() && !strings.HasPrefix(e.Name(), ".swept-") {
					t.Errorf("%s is in the attempts directory itself", e.Name())
				}
			}
			out, err := hostexec.ReadOutput(context.Background(), r, a, 1024)
			if err != nil || string(out) != "v=1\n" {
				t.Fatalf("outputs file read back: %q %v", out, err)
			}
		})
	}
}

// earlierAttempt writes the files an earlier build kept for an attempt in
// the attempts directory itself: its supervisor's pid, then exit (when
// not empty), its output and its outputs file.
func earlierAttempt(t *testing.T, base, id string, pid int, exit string) {
	t.Helper()
	if err := os.MkdirAll(base, 0o700); err != nil {
		t.Fatal(err)
	}
	run := strconv.Itoa(pid) + "\n"
	if exit != "" {
		run += exit + "\n"
	}
	for ext, text := range map[string]string{".run": run, ".out": "earlier out\n", ".err": "", ".output": "w=2\n"} {
		if err := os.WriteFile(filepath.Join(base, id+ext), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// An attempt that a build before the workflow directories started has its
// files in the attempts directory itself: an attempt of this build with
// its id finds it there, whether it ended or still runs, and never starts
// the command again beside it; a settle and the outputs file's read find
// it there too.
func TestAttemptOfAnEarlierBuildFoundWhereItIs(t *testing.T) {
	for name, r := range layoutRunners(t) {
		t.Run(name+" ended", func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "attempts")
			marker := filepath.Join(t.TempDir(), "ran")
			a := hostexec.Attempt{ID: "wf8.1.create.f.n.1.run", Output: true, Command: hostexec.Command{
				Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: `echo ran >>` + marker}}
			earlierAttempt(t, base, a.ID, 999999999, "5")
			res, err := r.RunAttempt(context.Background(), a)
			if err != nil || res.ExitCode != 5 || res.Stdout != "earlier out\n" {
				t.Fatalf("re-attached: %+v %v, want the earlier attempt's exit 5 and output", res, err)
			}
			if fileExists(marker) || fileExists(filepath.Join(base, "wf8")) {
				t.Fatalf("the command ran again (%v) or got a directory (%v)", fileExists(marker), fileExists(filepath.Join(base, "wf8")))
			}
			if res, err := r.Settle(context.Background(), a); err != nil || res.ExitCode != 5 {
				t.Fatalf("settled: %+v %v, want exit 5", res, err)
			}
			if out, err := hostexec.ReadOutput(context.Background(), r, a, 1024); err != nil || string(out) != "w=2\n" {
				t.Fatalf("outputs file read back: %q %v", out, err)
			}
		})
		t.Run(name+" running", func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "attempts")
			marker := filepath.Join(t.TempDir(), "ran")
			a := hostexec.Attempt{ID: "wf9.1.create.f.n.1.run", Command: hostexec.Command{
				Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: `echo ran >>` + marker}}
			sup := exec.Command("sleep", "30") // the earlier build's supervisor
			if err := sup.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sup.Process.Kill(); _ = sup.Wait() })
			earlierAttempt(t, base, a.ID, sup.Process.Pid, "")
			done := make(chan struct{})
			var res hostexec.Result
			var err error
			go func() { defer close(done); res, err = r.RunAttempt(context.Background(), a) }()
			select {
			case <-done:
				t.Fatalf("returned while the earlier attempt runs: %+v %v", res, err)
			case <-time.After(500 * time.Millisecond):
			}
			f, ferr := os.OpenFile(filepath.Join(base, a.ID+".run"), os.O_APPEND|os.O_WRONLY, 0)
			if ferr != nil {
				t.Fatal(ferr)
			}
			_, _ = f.WriteString("4\n")
			f.Close()
			_ = sup.Process.Kill()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the re-attach did not end with the earlier attempt")
			}
			if err != nil || res.ExitCode != 4 {
				t.Fatalf("re-attached: %+v %v, want the earlier attempt's exit 4", res, err)
			}
			if fileExists(marker) {
				t.Fatal("the command ran beside the earlier attempt")
			}
		})
	}
}

// The day's first attempt removes what is older than 7 days: files in the
// attempts directory and in its workflows' directories, and directories
// left empty for an hour; a new file in an old directory stays, and so
// does a new empty directory.
func TestSweepKeepsNewFilesOfOldDirectories(t *testing.T) {
	for name, r := range layoutRunners(t) {
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "attempts")
			ago := func(p string, d time.Duration) {
				t.Helper()
				at := time.Now().Add(-d)
				if err := os.Chtimes(p, at, at); err != nil {
					t.Fatal(err)
				}
			}
			write := func(p string, age time.Duration) string {
				t.Helper()
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
				ago(p, age)
				return p
			}
			week := 10 * 24 * time.Hour
			stale := write(filepath.Join(base, "w0", "w0.1.create.f.n.1.run.out"), week)
			recent := write(filepath.Join(base, "w0", "w0.2.create.f.n.1.run.out"), 0)
			flat := write(filepath.Join(base, "w1.1.create.f.n.1.run.out"), week)
			idle, fresh := filepath.Join(base, "w2"), filepath.Join(base, "w3")
			for _, d := range []string{idle, fresh} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			ago(idle, 2*time.Hour)
			ago(filepath.Join(base, "w0"), week)
			a := hostexec.Attempt{ID: "w4.1.create.f.n.1.run", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "true"}}
			if res, err := r.RunAttempt(context.Background(), a); err != nil || res.ExitCode != 0 {
				t.Fatalf("%+v %v", res, err)
			}
			for p, want := range map[string]bool{stale: false, flat: false, idle: false, recent: true, fresh: true} {
				if fileExists(p) != want {
					t.Errorf("%s: there %v, want %v", p, fileExists(p), want)
				}
			}
		})
	}
}

// A workflow's directory of attempts has the mode of the attempts
// directory, whatever the umask: 700 when gantry made that, and as a
// shared directory's (its group may write, set-group-ID) when its owner
// made it so, which the other users of the group go on using.
func TestAttemptDirectoryTakesTheAttemptsDirectorysMode(t *testing.T) {
	for name, r := range layoutRunners(t) {
		t.Run(name, func(t *testing.T) {
			shared := filepath.Join(t.TempDir(), "shared")
			if err := os.Mkdir(shared, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(shared, 0o770|os.ModeSetgid); err != nil {
				t.Fatal(err)
			}
			made := filepath.Join(t.TempDir(), "made", "attempts")
			for base, want := range map[string]os.FileMode{shared: os.ModeDir | os.ModeSetgid | 0o770, made: os.ModeDir | 0o700} {
				a := hostexec.Attempt{ID: "wfm.1.create.f.n.1.run", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "true"}}
				if res, err := r.RunAttempt(context.Background(), a); err != nil || res.ExitCode != 0 {
					t.Fatalf("%+v %v", res, err)
				}
				for _, d := range []string{base, filepath.Join(base, "wfm")} {
					fi, err := os.Stat(d)
					if err != nil {
						t.Fatal(err)
					}
					if got := fi.Mode() & (os.ModeDir | os.ModeSetgid | os.ModePerm); got != want {
						t.Errorf("%s: mode %v, want %v", d, got, want)
					}
				}
			}
		})
	}
}

// The day's sweep is done by the attempt that creates the day's stamp
// file; another that finds the stamp made since it looked goes on: a
// failed create ends no shell (the stamp here is a dangling symlink, which
// reads as absent and cannot be created over).
func TestSweepStampTakenByAnotherEndsNoShell(t *testing.T) {
	base := t.TempDir()
	if err := os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(base, ".swept-x")); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/bin/sh", "-c", `_gb=`+hostsh.Quote(base)+`; `+hostsh.SweepText(".swept-x")+`; echo alive`).CombinedOutput()
	if err != nil || string(out) != "alive\n" {
		t.Fatalf("%q %v: the shell did not go on", out, err)
	}
}

// Attempts that are each the first of the day on the host, at once, all
// run: only one sweeps, and none ends for it.
func TestTheDaysFirstAttemptsAllRun(t *testing.T) {
	for name, r := range layoutRunners(t) {
		t.Run(name, func(t *testing.T) {
			for round := range 5 {
				base := filepath.Join(t.TempDir(), "attempts")
				errs := make(chan error, 4)
				for i := range 4 {
					go func() {
						a := hostexec.Attempt{ID: fmt.Sprintf("wd%d.1.create.f.n%d.1.run", round, i), Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "echo ok"}}
						res, err := r.RunAttempt(context.Background(), a)
						if err == nil && (res.ExitCode != 0 || res.Stdout != "ok\n") {
							err = fmt.Errorf("%s: %+v", a.ID, res)
						}
						errs <- err
					}()
				}
				for range 4 {
					if err := <-errs; err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
				}
			}
		})
	}
}

// AttemptPath names the directory by the id's first part.
func TestAttemptPath(t *testing.T) {
	for id, want := range map[string]string{"wf.1.create.f.n.1.run": "wf/wf.1.create.f.n.1.run", "single": "single/single", "a-b_c.x": "a-b_c/a-b_c.x"} {
		if got := hostsh.AttemptPath(id); got != want {
			t.Errorf("AttemptPath(%q) = %q, want %q", id, got, want)
		}
	}
}
