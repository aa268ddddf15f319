package sshexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/linestest"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// durable is a command that counts its starts and ends in dir/count.
func durable(dir, attempt string, on func(hostexec.Stream, string)) hostexec.Attempt {
	count := filepath.Join(dir, "count")
	return hostexec.Attempt{ID: attempt, Command: hostexec.Command{OnLine: on, Env: map[string]string{"GANTRY_ATTEMPTS": dir},
		Script: `echo start >>` + hostsh.Quote(count) + `; echo line1; echo warn >&2; sleep 1.5; echo line2; echo end >>` + hostsh.Quote(count) + `; exit 7`}}
}

func counted(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "count"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// A durable command outlives the connection that started it; running the
// same attempt again waits for it and returns its result, and once it
// ended, reads the result it recorded. It never starts twice.
func TestDurableSSHReattach(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	dir := t.TempDir()
	first := linestest.New("line1")
	p1 := newPool(t, f, f.KnownHosts)
	done := make(chan error, 1)
	go func() {
		_, err := p1.Runner(f.Hosts[0].Addr, "").RunAttempt(context.Background(), durable(dir, "w1.1.f.n.1", first.On))
		done <- err
	}()
	first.Wait(t, "line1")
	p1.Close() // the executor goes away mid-command
	if err := <-done; err == nil {
		t.Fatal("the first run reported success over a dropped connection")
	}
	again := linestest.New()
	res, err := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "").RunAttempt(context.Background(), durable(dir, "w1.1.f.n.1", again.On))
	if err != nil {
		t.Fatal(err)
	}
	checkReattached(t, res, again, dir)
}

// A durable attempt whose connection ends while it runs (the connection
// dropped under it, the worker still there) is re-attached on a new
// connection: Run returns the command's own result, each output line is
// handed on once, and the command runs once. Before, Run reported the
// attempt failed ("the connection ended before the command reported an
// exit status"), and a retry started the command a second time.
func TestDurableReattachesAfterALostConnection(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	dir := t.TempDir()
	l := linestest.New("line1")
	p := newPool(t, f, f.KnownHosts)
	type ran struct {
		res hostexec.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := p.Runner(f.Hosts[0].Addr, "").RunAttempt(context.Background(), durable(dir, "w1.1.f.n.1", l.On))
		done <- ran{res, err}
	}()
	l.Wait(t, "line1")
	p.mu.Lock()
	for _, c := range p.conns {
		c.mu.Lock()
		if c.client != nil {
			_ = c.client.Close() // the connection ends; the pool stays
		}
		c.mu.Unlock()
	}
	p.mu.Unlock()
	r := <-done
	if r.err != nil {
		t.Fatalf("a lost connection failed the attempt: %v", r.err)
	}
	checkReattached(t, r.res, l, dir)
	got := strings.Join(l.Got(), ",")
	if got != "stdout:line1,stderr:warn,stdout:line2" && got != "stderr:warn,stdout:line1,stdout:line2" {
		t.Fatalf("lines handed on: %s, want each once", got)
	}
}

func TestDurableLocalReattach(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := durable(dir, "w1.1.f.n.1", nil)
	first := exec.Command("/bin/sh", "-c", sessionScript(cmd))
	first.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, _ := first.StdoutPipe()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var seen string
	for !strings.Contains(seen, "line1") {
		n, err := stdout.Read(buf)
		if err != nil {
			t.Fatalf("first run: %v (%q)", err, seen)
		}
		seen += string(buf[:n])
	}
	stdout.Close()                // the executor dies: nobody reads the command's output any more
	reaped := make(chan struct{}) // as init reaps an orphan (a zombie would look alive)
	go func() { _ = first.Wait(); close(reaped) }()
	defer func() { <-reaped }()
	again := linestest.New()
	cmd.OnLine = again.On
	res, err := localexec.Local{}.RunAttempt(context.Background(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	checkReattached(t, res, again, dir)
}

func checkReattached(t *testing.T, res hostexec.Result, l *linestest.Lines, dir string) {
	t.Helper()
	if res.ExitCode != 7 || !strings.Contains(res.Stdout, "line1\nline2\n") || res.Stderr != "warn\n" {
		t.Fatalf("re-attached result %+v", res)
	}
	if got := strings.Join(l.Got(), ","); !strings.Contains(got, "stdout:line2") {
		t.Fatalf("re-attached lines %s", got)
	}
	if c := counted(t, dir); c != "start end" {
		t.Fatalf("the host saw %q, want one start and one end", c)
	}
	// Once ended, the same attempt reads its result and runs nothing.
	res, err := localexec.Local{}.RunAttempt(context.Background(), durable(dir, "w1.1.f.n.1", nil))
	if err != nil || res.ExitCode != 7 || !strings.Contains(res.Stdout, "line2") {
		t.Fatalf("result read again: %+v %v", res, err)
	}
	if c := counted(t, dir); c != "start end" {
		t.Fatalf("the host saw %q after the result was read again", c)
	}
}

// A durable command that times out is killed with its process group, the
// kill is confirmed, and the kill is its recorded result.
func TestDurableTimeoutKillConfirmed(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			// 2s: long enough for the supervisor to start and record its pid on a
			// loaded machine (the kill is what this checks).
			cmd := hostexec.Attempt{ID: "w1.1.f.n.1", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir}, Timeout: 2 * time.Second,
				Script: "sleep 300 & sleep 301"}}
			_, err := r.RunAttempt(context.Background(), cmd)
			if !errors.Is(err, hostexec.ErrTimeout) || errors.Is(err, hostexec.ErrKill) {
				t.Fatalf("err = %v, want ErrTimeout and a confirmed kill", err)
			}
			run, _ := os.ReadFile(filepath.Join(dir, "w1.1.f.n.1.run"))
			pid, _, _ := strings.Cut(string(run), "\n") // the supervisor's pid, then the exit status
			if live := liveMembers(pid); len(live) > 0 {
				t.Fatalf("process group %s still there: %v", pid, live)
			}
			cmd.Timeout = 0
			res, err := r.RunAttempt(context.Background(), cmd)
			if err != nil || res.ExitCode != 143 {
				t.Fatalf("the killed attempt read again: %+v %v", res, err)
			}
		})
	}
}

func TestAttemptIDChecked(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"../x", ".hidden", "a/b", "a b", strings.Repeat("a", 201)} {
		_, err := localexec.Local{}.RunAttempt(context.Background(), hostexec.Attempt{ID: id, Command: hostexec.Command{Script: "echo ran"}})
		if err == nil || !strings.Contains(err.Error(), "attempt id") {
			t.Errorf("attempt %q: err %v", id, err)
		}
	}
}

// Two commands with the same lock never run at once on a host: the second
// waits, says for whom, then runs.
func TestHostLockSerializes(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "log")
			cmd := func(id string) hostexec.Attempt {
				return hostexec.Attempt{ID: id, Lock: "web.nginx.install", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": filepath.Join(dir, "attempts")},
					Script: "echo in-" + id + " >>" + hostsh.Quote(log) + "; sleep 0.5; echo out-" + id + " >>" + hostsh.Quote(log)}}
			}
			var wg sync.WaitGroup
			errs := make([]string, 2)
			for i, id := range []string{"wfA.1.create.f.n.1.run", "wfB.1.create.f.n.1.run"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := r.RunAttempt(context.Background(), cmd(id))
					if err != nil || res.ExitCode != 0 {
						t.Errorf("%s: %+v %v", id, res, err)
					}
					errs[i] = res.Stderr
				}()
			}
			wg.Wait()
			b, _ := os.ReadFile(log)
			f := strings.Fields(string(b))
			if len(f) != 4 || strings.TrimPrefix(f[0], "in-") != strings.TrimPrefix(f[1], "out-") {
				t.Fatalf("the two overlapped on the host: %q", f)
			}
			if !strings.Contains(errs[0]+errs[1], "gantry: waiting for ") {
				t.Fatalf("the waiter did not say so: %q", errs)
			}
		})
	}
}

// A supervisor whose connection is gone before it says where it is (the
// executor killed as the attempt starts) still runs the command to its
// end and records the result.
func TestDurableSurvivesAClosedConnectionAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := durable(dir, "w1.1.f.n.1", nil)
	first := exec.Command("/bin/sh", "-c", sessionScript(cmd))
	first.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // nobody reads: the first write gets SIGPIPE
	first.Stdout, first.Stderr = w, w
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	_ = first.Wait()
	res, err := localexec.Local{}.RunAttempt(context.Background(), cmd)
	if err != nil || res.ExitCode != 7 {
		t.Fatalf("re-attached: %+v %v", res, err)
	}
	if c := counted(t, dir); c != "start end" {
		t.Fatalf("the host saw %q", c)
	}
}

// Attempt files older than 7 days are removed by the first attempt of a
// day on the host, whether or not the directory was just made; the other
// attempts of the day leave them.
func TestOldAttemptsSweptOncePerDay(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	ssh := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	for name, r := range map[string]hostexec.AttemptRunner{"local": localexec.Local{}, "ssh agent": ssh, "ssh session": sessionSupervised(ssh)} {
		t.Run(name, func(t *testing.T) { oldAttemptsSwept(t, r) })
	}
}

func oldAttemptsSwept(t *testing.T, r hostexec.AttemptRunner) {
	dir := t.TempDir()
	attempts := filepath.Join(dir, "attempts")
	if err := os.MkdirAll(attempts, 0o700); err != nil {
		t.Fatal(err)
	}
	old := func(name string) string {
		p := filepath.Join(attempts, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		ten := time.Now().Add(-10 * 24 * time.Hour)
		if err := os.Chtimes(p, ten, ten); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(id string) {
		t.Helper()
		cmd := hostexec.Attempt{ID: id, Command: hostexec.Command{Script: "true", Env: map[string]string{"GANTRY_ATTEMPTS": attempts}}}
		if res, err := r.RunAttempt(context.Background(), cmd); err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v", id, res, err)
		}
	}
	stale := old("w0.1.create.f.n.1.run.out")
	recent := filepath.Join(attempts, "w0.1.create.f.n.2.run.out")
	if err := os.WriteFile(recent, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An attempt that ended (its exit status in its run file) goes with
	// its files; one whose pid runs no more (lost) too; one still running
	// (this test's pid, no status) stays whatever its files' age, as the
	// files of an attempt whose run file is young.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ended, lost := old("w0.1.create.f.n.4.run.run"), old("w0.1.create.f.n.5.run.run")
	endedOut, running, runningOut := old("w0.1.create.f.n.4.run.out"), old("w0.1.create.f.n.6.run.run"), old("w0.1.create.f.n.6.run.out")
	os.WriteFile(ended, []byte("123\n0\n"), 0o600)
	os.WriteFile(lost, []byte(strconv.Itoa(dead.Process.Pid)+"\n"), 0o600)
	os.WriteFile(running, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
	for _, p := range []string{ended, lost, running} {
		ten := time.Now().Add(-10 * 24 * time.Hour)
		os.Chtimes(p, ten, ten)
	}
	// a live pid that is not the attempt's (its id file names another
	// start time: the pid reused after a reboot) is a lost attempt
	reused, reusedID := old("w0.1.create.f.n.7.run.run"), old("w0.1.create.f.n.7.run.id")
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	os.WriteFile(reused, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
	os.WriteFile(reusedID, []byte(strings.TrimSpace(string(boot))+" 1\n"), 0o600)
	for _, p := range []string{reused, reusedID} {
		ten := time.Now().Add(-10 * 24 * time.Hour)
		os.Chtimes(p, ten, ten)
	}
	youngRun := filepath.Join(attempts, "w0.1.create.f.n.2.run.run")
	os.WriteFile(youngRun, []byte("123\n0\n"), 0o600)
	youngsOut := old("w0.1.create.f.n.2.run.err")
	run("w1.1.create.f.n.1.run")
	// the sweep runs in the background: the attempt does not wait for it
	gone := []string{stale, ended, endedOut, lost, reused, reusedID}
	for end := time.Now().Add(10 * time.Second); slices.ContainsFunc(gone, fileExists) && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if fileExists(stale) || !fileExists(recent) {
		t.Fatalf("after the day's first attempt: stale kept %v, recent kept %v", fileExists(stale), fileExists(recent))
	}
	for p, want := range map[string]bool{ended: false, endedOut: false, lost: false, running: true, runningOut: true, youngRun: true, youngsOut: true, reused: false, reusedID: false} {
		if fileExists(p) != want {
			t.Errorf("%s: kept %v, want %v", filepath.Base(p), fileExists(p), want)
		}
	}
	stale = old("w0.1.create.f.n.3.run.out")
	run("w1.1.create.f.n.2.run")
	if !fileExists(stale) {
		t.Fatalf("the day's second attempt swept again")
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// An attempt started by an earlier version kept its pid and exit status in
// <attempt>.pid and <attempt>.exit (its run file empty): running it again
// reads its result from those and starts nothing.
func TestDurableEarlierLayoutReadAgain(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			attempts := filepath.Join(dir, "attempts")
			if err := os.MkdirAll(attempts, 0o700); err != nil {
				t.Fatal(err)
			}
			for ext, body := range map[string]string{"run": "", "pid": "999999999\n", "out": "earlier\n", "err": "warned\n", "exit": "3\n"} {
				if err := os.WriteFile(filepath.Join(attempts, "w1.1.f.n.1."+ext), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ran := filepath.Join(dir, "ran")
			res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "w1.1.f.n.1", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": attempts}, Script: "echo >" + hostsh.Quote(ran)}})
			if err != nil || res.ExitCode != 3 || res.Stdout != "earlier\n" || res.Stderr != "warned\n" {
				t.Fatalf("read again: %+v %v", res, err)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("the attempt ran again")
			}
		})
	}
}

// Locally the runner takes the host lock itself and hands it to the
// supervisor, which then starts no flock; a lock held elsewhere is waited
// for by the runner too (saying so on the attempt's stderr), before the
// attempt is claimed, and the command runs only once it is free.
func TestLocalLockTakenWithoutFlock(t *testing.T) {
	dir := t.TempDir()
	calls := linestest.CountFlock(t, dir)
	attempts := filepath.Join(dir, "attempts")
	run := func(id, script string) hostexec.Result {
		t.Helper()
		res, err := localexec.Local{Worker: localexec.WorkerEnvOf(os.LookupEnv)}.RunAttempt(context.Background(), hostexec.Attempt{ID: id, Lock: "c.f.n", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": attempts}, Script: script}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v", id, res, err)
		}
		return res
	}
	count := func() int {
		b, _ := os.ReadFile(calls)
		return strings.Count(string(b), "\n")
	}
	run("a.1", "true") // the worker makes the directories, then takes the lock
	if n := count(); n != 0 {
		t.Fatalf("first attempt: %d flock calls, want none", n)
	}
	run("a.2", "true")
	if n := count(); n != 0 {
		t.Fatalf("second attempt: %d flock calls, want none", n)
	}
	holder, err := os.OpenFile(filepath.Join(dir, "locks", "c.f.n"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	released := time.Now().Add(500 * time.Millisecond)
	time.AfterFunc(500*time.Millisecond, func() { holder.Close() })
	res := run("a.3", "date +%s.%N")
	if res.Stderr != "gantry: waiting for a.2 on this host\n" || count() != 0 {
		t.Fatalf("a held lock: stderr %q, %d flock calls (want the waiting line, and none)", res.Stderr, count())
	}
	var sec, nsec int64
	if _, err := fmt.Sscanf(strings.Replace(strings.TrimSpace(res.Stdout), ".", " ", 1), "%d %d", &sec, &nsec); err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	if ran := time.Unix(sec, nsec); ran.Before(released.Add(-50 * time.Millisecond)) {
		t.Fatalf("the command ran at %s, before the lock was free at %s", ran, released)
	}
}

// A lock taken by an attempt that has not yet written its name (the
// moment between its flock and its holder file) is announced with the
// holder's name once it writes it, never as a wait for no one.
func TestLocalWaitNamesAHolderThatNamesItselfLate(t *testing.T) {
	dir := t.TempDir()
	attempts := filepath.Join(dir, "attempts")
	locks := filepath.Join(dir, "locks")
	if err := os.MkdirAll(locks, 0o700); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(locks, "c.f.n")
	holder, err := os.OpenFile(lock, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, func() { _ = os.WriteFile(lock+".holder", []byte("wfH.1.create.f.n.1.run\n"), 0o666) })
	time.AfterFunc(600*time.Millisecond, func() { holder.Close() })
	res, err := localexec.Local{}.RunAttempt(context.Background(), hostexec.Attempt{ID: "wfW.1.create.f.n.1.run", Lock: "c.f.n", Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": attempts}, Script: "true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if want := "gantry: waiting for wfH.1.create.f.n.1.run on this host\n"; res.Stderr != want {
		t.Fatalf("stderr %q, want %q", res.Stderr, want)
	}
}

// Two runs of one attempt started at the same moment (two executor
// replicas given the same dispatch, both reaching the node together): one
// starts the command, the other re-attaches to it, even when it looks
// before the starter has written its pid; neither takes the attempt for
// lost, and the command runs once.
func TestDurableSimultaneousStarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const attempts = 60
	var wg sync.WaitGroup
	errs := make(chan string, 2*attempts)
	for i := range attempts {
		id := "w1.1.create.f.n" + strings.Repeat("x", i%3) + "." + string(rune('a'+i%26)) + "." + filepath.Base(t.Name()) + "." + itoa(i)
		cmd := hostexec.Attempt{ID: id, Command: hostexec.Command{Env: map[string]string{"GANTRY_ATTEMPTS": dir},
			Script: `echo run >>` + hostsh.Quote(filepath.Join(dir, "count."+itoa(i))) + `; sleep 0.5`}}
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := localexec.Local{}.RunAttempt(context.Background(), cmd)
				if err != nil || res.ExitCode != 0 {
					errs <- id + ": " + errString(err) + " exit " + itoa(res.ExitCode) + " " + res.Stderr
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for i := range attempts {
		b, _ := os.ReadFile(filepath.Join(dir, "count."+itoa(i)))
		if n := strings.Count(string(b), "run"); n != 1 {
			t.Errorf("attempt %d ran %d times", i, n)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
