package localexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"golang.org/x/sys/unix"
)

// A durable attempt with transport local is supervised by a shell that
// records it in the same files as over SSH (internal/hostsh/attempt.go), but the worker
// does the rest itself: it takes the lock, waiting for it, and asks the
// attempt's Turn (Local.takeTurn), claims the attempt (an exclusive create
// of the run file), gives the command the output files as its stdout and
// stderr, and follows those files for the output's lines. The host then pays one program start (sh) and a
// subshell per attempt, and no tee or flock. The shell records its pid
// (the process group) first and the exit status last, and outlives the
// worker. An attempt found claimed already is re-attached to by the
// session supervisor's script, as before.

// attemptsDir is the directory of cmd's attempt files on this
// machine, where attemptsBase's shell would find it: GANTRY_ATTEMPTS of
// cmd.Env, else .gantry/attempts in cmd.Env's HOME or the worker's (the
// HOME a local command gets). Its secrets never move it.
func (l Local) attemptsDir(cmd hostexec.Command) (string, error) {
	if base := cmd.Env["GANTRY_ATTEMPTS"]; base != "" {
		return base, nil
	}
	home, ok := cmd.Env["HOME"]
	if !ok {
		home = l.Worker.home()
	}
	if home == "" {
		return "", errors.New("no home directory for the attempts' files: set GANTRY_ATTEMPTS or HOME in the command's environment")
	}
	return home + "/.gantry/attempts", nil
}

// claimAttempt creates the attempt's run file, and the directories when
// they are missing. It returns errClaimed when the file exists.
func (l Local) claimAttempt(base, attempt string) error {
	path := base + "/" + attempt + ".run"
	for try := 0; ; try++ {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
		switch {
		case err == nil:
			return f.Close()
		case errors.Is(err, fs.ErrExist):
			return cmdrun.ErrClaimed
		case errors.Is(err, fs.ErrNotExist) && try == 0:
			// not cleaned: ".." is resolved by the kernel, as the shell's is
			if err := errors.Join(os.MkdirAll(base, 0o700), os.MkdirAll(base+"/../locks", 0o700)); err != nil {
				return fmt.Errorf("%w: attempts directory: %w", hostexec.ErrAttemptFiles, err)
			}
		default:
			return fmt.Errorf("%w: record the attempt: %w", hostexec.ErrAttemptFiles, err)
		}
	}
}

// sweepLocal removes attempt files older than 7 days, once a day (UTC),
// as the supervisor's shell does on a host (hostsh.Sweep): an attempt's
// files once it ended, never those of one still running.
func sweepLocal(base string) {
	stamp := base + "/.swept-" + hostsh.SweepDay()
	if _, err := os.Stat(stamp); err == nil {
		return
	}
	old, _ := filepath.Glob(base + "/.swept-*")
	for _, p := range old {
		_ = os.Remove(p)
	}
	if f, err := os.Create(stamp); err == nil {
		f.Close()
	}
	entries, _ := os.ReadDir(base)
	cutoff := time.Now().Add(-7 * 24 * time.Hour)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) && !strings.HasPrefix(e.Name(), ".swept-") {
			sweepOld(base, e.Name())
		}
	}
}

// sweepOld removes the old entry name of the attempts directory base: a
// run file with its attempt's files once the attempt ended (an exit
// status recorded, or its pid runs no more); an attempt's other file
// when it has no run file; anything else.
func sweepOld(base, name string) {
	p := filepath.Join(base, name)
	ext := filepath.Ext(name)
	switch ext {
	case ".run":
		if attemptRuns(p) {
			return
		}
		stem := strings.TrimSuffix(p, ext)
		for _, x := range []string{".run", ".out", ".err", ".id", ".f", ".pid", ".exit"} {
			_ = os.RemoveAll(stem + x)
		}
	case ".out", ".err", ".id", ".f":
		if _, err := os.Stat(strings.TrimSuffix(p, ext) + ".run"); err == nil {
			return // its run file decides
		}
		_ = os.RemoveAll(p)
	default:
		_ = os.RemoveAll(p)
	}
}

// attemptRuns says whether the run file p names a process that still
// runs and no exit status: the attempt's own, when its id file
// (hostsh.RecordID: "<boot id> <start time>") says who that is.
func attemptRuns(p string) bool {
	b, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) > 1 && strings.TrimSpace(lines[1]) != "" {
		return false // ended
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 1 {
		return false
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil && syscall.Kill(pid, 0) == syscall.ESRCH {
		return false
	}
	id, err := os.ReadFile(strings.TrimSuffix(p, ".run") + ".id")
	boot, berr := os.ReadFile("/proc/sys/kernel/random/boot_id")
	stat, serr := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	want := strings.Fields(string(id))
	if err != nil || berr != nil || len(want) != 2 {
		return true // nothing tells: trusted by its pid
	}
	if serr != nil || want[0] != strings.TrimSpace(string(boot)) {
		return false // another boot: not that process
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	return len(f) > 19 && f[19] == want[1] // field 22: its start time
}

// localAttemptScript is the shell that supervises a local attempt: it
// records who it is (hostsh.RecordID) and its pid, takes the lock when the worker could not (held: the
// worker passes it on fd 3), runs the command in a subshell, and records
// its exit status.
func localAttemptScript(cmd hostexec.Attempt, ex, run string, held bool) string {
	var b strings.Builder
	b.WriteString(ex)
	b.WriteString(`_gr=` + hostsh.Quote(run) + `; _gd=${_gr%.run}; _gb=${_gd%/*}
` + hostsh.RecordID + `_gI; echo $$ >>"$_gr"; `)
	if held {
		b.WriteString("exec 9>&3 3>&-; ")
	}
	b.WriteString(hostsh.HostLock(cmd.Lock, cmd.Mark, held))
	b.WriteString(`( eval ` + hostsh.Quote(cmdrun.Script(cmd)) + ` ) </dev/null 9>&-; _gx=$?; echo $_gx >>"$_gr"; exit $_gx`)
	return b.String()
}

// runAttempt runs the durable cmd as above. It returns errClaimed,
// having started nothing, when the attempt was started before; with a
// lock, it first takes the lock (Local.takeTurn), so an attempt that waits
// for it, or that its Turn declines, has claimed nothing.
func (l Local) runAttempt(ctx context.Context, cmd hostexec.Attempt, base string) (hostexec.Result, error) {
	res := hostexec.Result{ExitCode: -1, Started: time.Now()}
	ex, err := cmdrun.CheckedExports(cmd.Command)
	if err != nil {
		return res, err
	}
	if err := cmdrun.CheckIDs(cmd); err != nil {
		return res, err
	}
	if err := cmdrun.BeforeStart(cmd.Command); err != nil {
		return res, err
	}
	dir := base + "/" + cmd.ID
	if _, err := os.Lstat(dir + ".run"); err == nil {
		return res, cmdrun.ErrClaimed // started before: re-attach, without waiting for the lock
	}
	rctx, cancel := cmdrun.RunContext(ctx, cmd.Timeout)
	defer cancel()
	mask := cmdrun.NewMasker(cmd.Secrets, cmd.Mask...)
	out := &cmdrun.Output{Stream: hostexec.Stdout, OnLine: cmd.OnLine, Mask: mask}
	errOut := &cmdrun.Output{Stream: hostexec.Stderr, OnLine: cmd.OnLine, Mask: mask}
	var t turn
	if cmd.Lock != "" {
		if t, err = l.takeTurn(rctx, cmd, base, errOut); err != nil {
			errOut.Flush()
			res.Ended, res.Stderr = time.Now(), errOut.String()
			return res, err
		}
	}
	if err := l.claimAttempt(base, cmd.ID); err != nil {
		t.release()
		return res, err
	}
	sweepLocal(base)
	outFile, errFile, err := openOutputFiles(dir)
	if err != nil {
		t.release()
		return res, err
	}
	lock := t.file
	if lock == nil && cmd.Lock != "" {
		lock = takeLock(cmd, base) // the worker could not wait for it: the shell takes it if it can
	}
	c := exec.Command("/bin/sh", "-c", localAttemptScript(cmd, ex, dir+".run", lock != nil))
	c.Stdout, c.Stderr, c.Stdin = outFile, errFile, nil
	c.Env = l.Worker.environ(cmd.Secrets)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if lock != nil {
		c.ExtraFiles = []*os.File{lock} // fd 3
	}
	err = c.Start()
	outFile.Close()
	errFile.Close()
	if lock != nil {
		lock.Close() // the command's copy holds it now
	}
	if err != nil {
		_ = os.Remove(dir + ".run") // nothing started
		return res, fmt.Errorf("start /bin/sh: %w", err)
	}
	return l.waitLocalAttempt(rctx, cmd, c, dir, res, out, errOut)
}

// turn is a local attempt's host lock, taken before the attempt is
// claimed, on a descriptor of the worker's own that the shell inherits;
// none when the worker cannot take it (the shell then takes it itself).
type turn struct {
	file *os.File
}

// release lets the lock go without starting anything.
func (t turn) release() {
	if t.file != nil {
		t.file.Close()
	}
}

// takeTurn takes cmd's host lock for the attempt, before the
// attempt is claimed, on a descriptor of the worker's own that the shell
// inherits. While another holds it, it waits (and says so on errOut, as the
// supervisor's flock would). Holding it, it asks cmd.Turn when it had to
// wait or when the lock's last holder left cmd.Mark and exit status 0
// (cmdrun.Asks): declined, it lets the lock go and returns ErrDeclined; a
// ctx done meanwhile, its error. A lock the worker cannot take at all (the
// lock file cannot be opened or locked here) is left to the shell: an
// empty turn.
func (l Local) takeTurn(ctx context.Context, cmd hostexec.Attempt, base string, errOut *cmdrun.Output) (turn, error) {
	locks := base + "/../locks"
	if _, err := os.Stat(locks); err != nil {
		// not cleaned: ".." is resolved by the kernel, as the shell's is
		_ = os.MkdirAll(base, 0o700)
		_ = os.MkdirAll(locks, 0o700)
	}
	lockPath := locks + "/" + cmd.Lock
	f, err := os.OpenFile(lockPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		return turn{}, nil // the shell takes it, as it can
	}
	t, fd := turn{file: f}, int(f.Fd())
	waited, said := false, false
	since := time.Now()
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			t.release()
			return turn{}, nil // the shell takes it, as it can
		}
		waited = true
		if !said {
			said = sayWaiting(errOut, lockPath, time.Since(since))
		}
		select {
		case <-ctx.Done():
			t.release()
			return turn{}, cmdrun.EndErr(ctx)
		case <-time.After(wait):
		}
	}
	// The last holder, then this attempt named as the holder (one that
	// waits now says for whom); put back as it was if it does not start.
	prev, _ := os.ReadFile(lockPath + ".holder")
	h := parseHolder(prev)
	h.ExitCode, h.Waited = recordedExit(base, h.Attempt), waited
	_ = writeHolder(lockPath+".holder", []byte(cmd.ID+hostsh.MarkWord(cmd.Mark)+"\n"))
	if cmdrun.Asks(cmd, h) {
		start := ctx.Err() == nil && (cmd.Turn == nil || cmd.Turn(h))
		if ctx.Err() != nil || !start {
			_ = writeHolder(lockPath+".holder", prev)
			t.release()
			if ctx.Err() != nil {
				return turn{}, cmdrun.EndErr(ctx)
			}
			return turn{}, hostexec.ErrDeclined
		}
	}
	return t, nil
}

// writeHolder names a lock's holder: over the old line, then cut to
// length, rather than emptied first and written (os.WriteFile): ext4
// writes out a file emptied by O_TRUNC when it is closed, which made a
// holder write cost 384 µs against 143 µs in place (300 writes each on
// the development VM). A reader reads one line: the new one whole, as
// the file is cut after it.
func writeHolder(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(line, 0)
	if err == nil {
		err = f.Truncate(int64(len(line)))
	}
	return errors.Join(err, f.Close())
}

// holderNamesItselfWithin bounds how long a waiter waits for the lock's
// holder to write its name: a holder writes it just after it takes the
// lock, so one seen between the two is named a moment later.
const holderNamesItselfWithin = time.Second

// sayWaiting prints the line saying whom the attempt waits for, once the
// lock's holder has named itself (or, after holderNamesItselfWithin, with
// what the holder file says), and reports whether it did.
func sayWaiting(errOut *cmdrun.Output, lockPath string, waited time.Duration) bool {
	h := readHolder(lockPath)
	if h.Attempt == "" && waited < holderNamesItselfWithin {
		return false
	}
	_, _ = errOut.Write([]byte(cmdrun.WaitingLine(h.Attempt)))
	return true
}

// readHolder reads a lock's holder file (lockPath.holder): the attempt
// that holds the lock, or held it last, and its mark.
func readHolder(lockPath string) hostexec.Holder {
	b, _ := os.ReadFile(lockPath + ".holder")
	return parseHolder(b)
}

// parseHolder reads a holder file's content.
func parseHolder(b []byte) hostexec.Holder {
	h := hostexec.Holder{ExitCode: -1}
	first, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(first)
	if len(f) > 0 && hostsh.ValidAttempt(f[0]) == nil {
		h.Attempt = f[0]
	}
	if len(f) > 1 {
		h.Mark = f[1]
	}
	return h
}

// recordedExit is the exit status attempt recorded in its run file, -1
// when none is (or there is no such attempt).
func recordedExit(base, attempt string) int {
	if attempt == "" || hostsh.ValidAttempt(attempt) != nil {
		return -1
	}
	b, err := os.ReadFile(base + "/" + attempt + ".run")
	if err != nil {
		return -1
	}
	l := strings.Split(string(b), "\n")
	if len(l) < 2 {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(l[1]))
	if err != nil {
		return -1
	}
	return n
}

// openOutputFiles makes the attempt's output files and its id file (when
// a name is taken, what is there stays) and returns the output files, open
// to append: each is opened once.
func openOutputFiles(dir string) (out, errs *os.File, err error) {
	const flags = os.O_WRONLY | os.O_APPEND | os.O_CREATE
	out, err1 := os.OpenFile(dir+".out", flags, 0o600)
	errs, err2 := os.OpenFile(dir+".err", flags, 0o600)
	id, err3 := os.OpenFile(dir+".id", flags, 0o600)
	if err3 == nil {
		err3 = id.Close()
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		out.Close()
		errs.Close()
		return nil, nil, fmt.Errorf("attempt output files: %w", err)
	}
	return out, errs, nil
}

// waitLocalAttempt follows the attempt's output files into out and errOut
// until its shell ends, or kills its process group when rctx ends
// (timeout or cancel).
func (l Local) waitLocalAttempt(rctx context.Context, cmd hostexec.Attempt, c *exec.Cmd, dir string, res hostexec.Result, out, errOut *cmdrun.Output) (hostexec.Result, error) {
	ended := make(chan struct{})
	followed := make(chan struct{}, 2)
	go func() { followFile(dir+".out", out, ended); followed <- struct{}{} }()
	go func() { followFile(dir+".err", errOut, ended); followed <- struct{}{} }()
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	var werr error
	killed := false
	select {
	case werr = <-waited:
	case <-rctx.Done():
		pgid := make(chan hostsh.Marked, 1)
		pgid <- hostsh.Marked{PGID: c.Process.Pid, Dir: dir}
		kerr := l.killAttempt(cmd.ID, pgid, waited)
		werr, killed = errors.Join(cmdrun.EndErr(rctx), kerr), true
		<-waited
	}
	close(ended)
	<-followed
	<-followed
	out.Flush()
	errOut.Flush()
	res.Ended, res.Stdout, res.Stderr = time.Now(), out.String(), errOut.String()
	var ee *exec.ExitError
	switch {
	case killed:
		return res, werr
	case werr == nil:
		res.ExitCode = 0
	case errors.As(werr, &ee) && ee.Exited():
		res.ExitCode = ee.ExitCode()
	default:
		return res, werr
	}
	return res, nil
}

// followFile copies what is written to path into w as it comes, until
// ended is closed and what was written by then has been read.
func followFile(path string, w io.Writer, ended <-chan struct{}) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	buf := make([]byte, 32<<10)
	wait := time.Millisecond
	for {
		n, _ := f.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			wait = time.Millisecond
			continue
		}
		select {
		case <-ended:
			_, _ = io.CopyBuffer(w, f, buf)
			return
		case <-time.After(wait):
			wait = min(2*wait, 50*time.Millisecond)
		}
	}
}
