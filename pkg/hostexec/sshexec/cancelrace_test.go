package sshexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// markedAlive lists the live processes whose command line has the word
// marker (a sleep's unique duration).
func markedAlive(marker string) []int {
	var pids []int
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("\x00"+marker+"\x00")) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err == nil && running(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A durable attempt cancelled within milliseconds of its start, at any
// moment of it, is killed on the host or never starts there: once Run
// returned its cancel, no process of the attempt runs, a moment later
// either. In a host agent and in a session supervisor of its own.
func TestCancelRightAtStartLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	delays := []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 1500 * time.Microsecond, 2 * time.Millisecond, 3 * time.Millisecond,
		4 * time.Millisecond, 5 * time.Millisecond, 7 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}
	type started struct {
		what   string
		marker string
	}
	var all []started
	var dirs []string
	neverStarted := func(t *testing.T) int {
		n := 0
		for _, d := range dirs {
			runs, _ := filepath.Glob(d + "/c.*.run")
			for _, p := range runs {
				if b, _ := os.ReadFile(p); string(b) == "0\n143\nunstarted\n" {
					n++
				}
			}
		}
		return n
	}
	agents := r
	for _, path := range []string{"agent", "session"} {
		dir := t.TempDir()
		dirs = append(dirs, dir)
		cmd := func(attempt, script string) hostexec.Attempt {
			return hostexec.Attempt{ID: attempt, Command: hostexec.Command{Script: script, Env: map[string]string{"GANTRY_ATTEMPTS": dir}}}
		}
		r := agents
		if path == "session" {
			r = sessionSupervised(agents)
		}
		// an agent waits idle, as one does after a node ran
		if res, err := r.RunAttempt(context.Background(), cmd("warm", "true")); err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: warm: %+v %v", path, res, err)
		}
		for round := range 2 {
			for i, d := range delays {
				marker := fmt.Sprintf("61.%09d", rand.IntN(1e9))
				what := fmt.Sprintf("%s, cancel %v after the start (round %d)", path, d, round)
				all = append(all, started{what, marker})
				ctx, cancel := context.WithCancel(context.Background())
				stop := time.AfterFunc(d, cancel)
				res, err := r.RunAttempt(ctx, cmd(fmt.Sprintf("c.%d.%d", round, i), "sleep "+marker))
				stop.Stop()
				cancel()
				if !errors.Is(err, hostexec.ErrCancelled) || errors.Is(err, hostexec.ErrKill) {
					t.Errorf("%s: %+v %v, want cancelled, the kill confirmed", what, res, err)
				}
			}
		}
	}
	time.Sleep(3 * time.Second)
	t.Logf("attempts claimed by their cancel, never started: %d of %d", neverStarted(t), len(all))
	for _, s := range all {
		if pids := markedAlive(s.marker); len(pids) > 0 {
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Errorf("%s: reported cancelled, yet sleep %s runs on the host 3 s later (pids %v)", s.what, s.marker, pids)
		}
	}
}

// A cancel that reaches the host before the attempt's supervisor claimed
// it claims it instead, recorded killed: the request that comes after it
// starts nothing there (an agent's, or a session supervisor's), and a
// settle says the attempt was killed.
func TestCancelBeforeTheClaimStartsNothing(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "").(*sshRunner)
	dir := t.TempDir()
	client, err := r.pool.client(context.Background(), r.entry())
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"agent", "session"} {
		ran := filepath.Join(dir, path+".ran")
		cmd := hostexec.Attempt{ID: "x." + path, Command: hostexec.Command{Script: "touch " + hostsh.Quote(ran), Env: map[string]string{"GANTRY_ATTEMPTS": dir + "/sub"}}}
		run := hostexec.AttemptRunner(r)
		if path == "session" {
			run = sessionSupervised(r)
		}
		if err := r.cancelStart(client, hostexec.Attempt{ID: cmd.ID, Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir + "/sub"}}}); err != nil {
			t.Fatalf("%s: cancel: %v", path, err)
		}
		res, err := run.RunAttempt(context.Background(), cmd)
		if err != nil || res.ExitCode != 143 {
			t.Errorf("%s: %+v %v, want the recorded kill (143)", path, res, err)
		}
		if fileExists(ran) {
			t.Errorf("%s: the attempt started after its cancel", path)
		}
		if res, err := r.Settle(context.Background(), cmd); !errors.Is(err, hostexec.ErrNoAttempt) {
			t.Errorf("%s: settle: %+v %v, want never started", path, res, err)
		}
	}
}
