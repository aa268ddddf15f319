package sshexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/linestest"
)

// holdLock takes the host lock lock of the attempts directory base from
// the test itself (as another attempt would hold it) and returns its
// release.
func holdLock(t *testing.T, base, lock string) func() {
	t.Helper()
	locks := filepath.Join(filepath.Dir(base), "locks")
	if err := os.MkdirAll(locks, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(locks, lock), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(locks, lock+".holder"), []byte("other.1.create.f.n.1.run\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { f.Close() }) }
	t.Cleanup(release)
	return release
}

// An attempt that waits for its host lock longer than it takes the worker
// to start following its output (followAfter, over SSH) has its output
// whole: its stdout is there, and nothing but the command and the waiting
// line writes to it. Before, over SSH the follower's tail looked for the
// attempt's stdout file before the attempt made it: "tail: cannot open
// ...out" and "tail: no files remaining" came out as the attempt's stderr,
// and its stdout was lost.
func TestWaitingAttemptKeepsItsOutputWhole(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "attempts")
			release := holdLock(t, base, "c.f.n")
			time.AfterFunc(time.Second, release)
			lines := linestest.New()
			res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w.1.create.f.n.1.run", Lock: "c.f.n", Command: hostexec.Command{OnLine: lines.On,
				Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "echo first; sleep 0.3; echo second; echo warn >&2"}})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%+v %v", res, err)
			}
			if res.Stdout != "first\nsecond\n" {
				t.Errorf("stdout %q, want the command's two lines", res.Stdout)
			}
			if want := "gantry: waiting for other.1.create.f.n.1.run on this host\nwarn\n"; res.Stderr != want {
				t.Errorf("stderr %q, want %q", res.Stderr, want)
			}
			for _, l := range lines.Got() {
				if strings.Contains(l, "tail") || strings.Contains(l, "cannot open") {
					t.Errorf("output line %q", l)
				}
			}
		})
	}
}

// Once an attempt holds its host lock, and before anything of it starts,
// its Turn is asked when the attempt that held the lock last left the same
// mark and exit status 0, and when it had to wait for the lock; a Turn
// that says no starts nothing and leaves the attempt id unused on the
// host (ErrDeclined). A different mark, or a last holder that failed,
// asks nothing: the attempt starts as it would without a Turn.
func TestTurnAskedAtTheLock(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "attempts")
			ran := filepath.Join(dir, "ran")
			var mu sync.Mutex
			var asked []hostexec.Holder
			run := func(id, mark, script string, start bool) (hostexec.Result, error) {
				t.Helper()
				return r.RunAttempt(context.Background(), hostexec.Attempt{ID: id, Lock: "c.f.n", Mark: mark,
					Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "echo " + id + " >>" + hostsh.Quote(ran) + "; " + script},
					Turn:    func(h hostexec.Holder) bool { mu.Lock(); defer mu.Unlock(); asked = append(asked, h); return start }})
			}
			took := func() []hostexec.Holder {
				mu.Lock()
				defer mu.Unlock()
				a := asked
				asked = nil
				return a
			}
			// the first: nothing held the lock before
			if res, err := run("a.1.create.f.n.1.run", "create.h1", "true", false); err != nil || res.ExitCode != 0 {
				t.Fatalf("a: %+v %v", res, err)
			}
			if a := took(); len(a) != 0 {
				t.Fatalf("a was asked %+v; nothing held the lock before it", a)
			}
			// the same mark after a success: asked, and declined
			res, err := run("b.1.create.f.n.1.run", "create.h1", "true", false)
			if !errors.Is(err, hostexec.ErrDeclined) {
				t.Fatalf("b: %+v %v, want ErrDeclined", res, err)
			}
			if a := took(); len(a) != 1 || a[0] != (hostexec.Holder{Attempt: "a.1.create.f.n.1.run", Mark: "create.h1", ExitCode: 0}) {
				t.Fatalf("b was asked %+v", a)
			}
			if _, err := os.Stat(filepath.Join(base, "b.1.create.f.n.1.run.run")); !os.IsNotExist(err) {
				t.Fatalf("b's attempt was claimed on the host: %v", err)
			}
			holder := filepath.Join(dir, "locks", "c.f.n.holder")
			if b, _ := os.ReadFile(holder); string(b) != "a.1.create.f.n.1.run create.h1\n" {
				t.Fatalf("holder file %q after b declined, want a's again", b)
			}
			// asked and told to start: it runs, and holds the lock after
			if res, err := run("c.1.create.f.n.1.run", "create.h1", "exit 3", true); err != nil || res.ExitCode != 3 {
				t.Fatalf("c: %+v %v", res, err)
			}
			if a := took(); len(a) != 1 || a[0].Attempt != "a.1.create.f.n.1.run" {
				t.Fatalf("c was asked %+v", a)
			}
			// after a failure (c: 3), the same mark asks nothing
			if res, err := run("d.1.create.f.n.1.run", "create.h1", "true", false); err != nil || res.ExitCode != 0 {
				t.Fatalf("d: %+v %v", res, err)
			}
			// another mark (a delete of the node) asks nothing
			if res, err := run("e.1.delete.f.n.1.run", "delete.h1", "true", false); err != nil || res.ExitCode != 0 {
				t.Fatalf("e: %+v %v", res, err)
			}
			// nor does a create after that delete
			if res, err := run("f.1.create.f.n.1.run", "create.h1", "true", false); err != nil || res.ExitCode != 0 {
				t.Fatalf("f: %+v %v", res, err)
			}
			if a := took(); len(a) != 0 {
				t.Fatalf("d, e or f were asked %+v", a)
			}
			b, _ := os.ReadFile(ran)
			if got := strings.Join(strings.Fields(string(b)), " "); got != "a.1.create.f.n.1.run c.1.create.f.n.1.run d.1.create.f.n.1.run e.1.delete.f.n.1.run f.1.create.f.n.1.run" {
				t.Fatalf("the host ran %q", got)
			}
			if b, _ := os.ReadFile(holder); string(b) != "f.1.create.f.n.1.run create.h1\n" {
				t.Fatalf("holder file %q", b)
			}
		})
	}
}

// An attempt that had to wait for its lock is asked once it holds it,
// with the attempt it waited for: declined, it starts nothing.
func TestTurnAskedAfterWaiting(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "attempts")
			ran := filepath.Join(dir, "ran")
			cmd := func(id string, turn func(hostexec.Holder) bool) hostexec.Attempt {
				return hostexec.Attempt{ID: id, Lock: "c.f.n", Mark: "create.h1", Turn: turn, Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": base},
					Script: "echo " + id + " >>" + hostsh.Quote(ran) + "; sleep 0.6"}}
			}
			first := make(chan error, 1)
			go func() {
				_, err := r.RunAttempt(context.Background(), cmd("a.1.create.f.n.1.run", func(hostexec.Holder) bool { return true }))
				first <- err
			}()
			deadline := time.Now().Add(10 * time.Second)
			for { // a holds the lock
				if b, _ := os.ReadFile(ran); len(b) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("a never started")
				}
				time.Sleep(10 * time.Millisecond)
			}
			var got hostexec.Holder
			res, err := r.RunAttempt(context.Background(), cmd("b.1.create.f.n.1.run", func(h hostexec.Holder) bool { got = h; return false }))
			if !errors.Is(err, hostexec.ErrDeclined) {
				t.Fatalf("b: %+v %v, want ErrDeclined", res, err)
			}
			if got != (hostexec.Holder{Attempt: "a.1.create.f.n.1.run", Mark: "create.h1", ExitCode: 0, Waited: true}) {
				t.Fatalf("b was asked with %+v", got)
			}
			if res.Stderr != "gantry: waiting for a.1.create.f.n.1.run on this host\n" {
				t.Fatalf("b's stderr %q: the waiting line and nothing else", res.Stderr)
			}
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(ran); string(b) != "a.1.create.f.n.1.run\n" {
				t.Fatalf("the host ran %q", b)
			}
		})
	}
}

// An attempt cancelled while it waits for its host lock has started
// nothing, and starts nothing once the lock is free: over SSH its host
// agent, left waiting when the worker dropped it, gets no answer to its
// question and lets the lock go.
func TestCancelWhileWaitingForTheLockStartsNothing(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "attempts")
			ran := filepath.Join(dir, "ran")
			release := holdLock(t, base, "c.f.n")
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := r.RunAttempt(ctx, hostexec.Attempt{ID: "w.1.create.f.n.1.run", Lock: "c.f.n", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": base},
				Script: "echo ran >>" + hostsh.Quote(ran)}})
			if !errors.Is(err, hostexec.ErrCancelled) {
				t.Fatalf("%v, want ErrCancelled", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("the cancel took %v", d)
			}
			release()
			time.Sleep(time.Second)
			if _, err := os.Stat(ran); !os.IsNotExist(err) {
				t.Fatalf("the command ran once the lock was free: %v", err)
			}
			// over SSH the cancel claims the attempt, recorded never started
			if b, err := os.ReadFile(filepath.Join(base, "w.1.create.f.n.1.run.run")); !os.IsNotExist(err) && string(b) != "0\n143\n"+hostsh.Unstarted+"\n" {
				t.Fatalf("the attempt was claimed: %q %v", b, err)
			}
			// the lock is free again: nothing left holds it
			f, err := os.OpenFile(filepath.Join(dir, "locks", "c.f.n"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatalf("the lock is still held: %v", err)
			}
		})
	}
}
