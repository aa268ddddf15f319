package hostexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// A durable attempt with transport local is supervised by a shell that
// records it in the same files as over SSH (durable.go), but the worker
// does the rest itself: it claims the attempt (an exclusive create of the
// run file), takes the lock (takeLock), gives the command the output
// files as its stdout and stderr, and follows those files for the
// output's lines. The host then pays one program start (sh) and a
// subshell per attempt, and no tee or flock. The shell records its pid
// (the process group) first and the exit status last, and outlives the
// worker. An attempt found claimed already is re-attached to by the
// session supervisor's script, as before.

// attemptsBase is the directory of cmd's attempt files, as the supervisor
// script's shell would find it, and false when the worker cannot know it
// (it is a secret, or there is no home directory). The command's Env may
// set GANTRY_ATTEMPTS or HOME: the shell exports it first.
func attemptsBase(cmd Command) (string, bool) {
	_, secret := cmd.Secrets["GANTRY_ATTEMPTS"]
	_, secretHome := cmd.Secrets["HOME"]
	if secret || secretHome {
		return "", false
	}
	if base := cmd.Env["GANTRY_ATTEMPTS"]; base != "" {
		return base, true
	}
	home, ok := cmd.Env["HOME"]
	if !ok {
		home = homeDir()
		if home == "" {
			return "", false
		}
	}
	return home + "/.gantry/attempts", true
}

// errClaimed: the attempt's run file exists (it started before; over SSH,
// the agent answered "R").
var errClaimed = errors.New("the attempt was started before")

// claimAttempt creates the attempt's run file (a spare linked in, or a
// new file), and the directories when they are missing. It returns
// errClaimed when the file exists.
func claimAttempt(base, attempt string) error {
	path := base + "/" + attempt + ".run"
	if placed, err := placeSpare(base, path); placed {
		if errors.Is(err, fs.ErrExist) {
			return errClaimed
		}
		return err
	}
	for try := 0; ; try++ {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
		switch {
		case err == nil:
			return f.Close()
		case errors.Is(err, fs.ErrExist):
			return errClaimed
		case errors.Is(err, fs.ErrNotExist) && try == 0:
			// not cleaned: ".." is resolved by the kernel, as the shell's is
			if err := errors.Join(os.MkdirAll(base, 0o700), os.MkdirAll(base+"/../locks", 0o700)); err != nil {
				return fmt.Errorf("attempts directory: %w", err)
			}
		default:
			return fmt.Errorf("record the attempt: %w", err)
		}
	}
}

// sweepLocal removes attempt files older than 7 days, once a day (UTC),
// as the supervisor's shell does on a host.
func sweepLocal(base string) {
	stamp := base + "/.swept-" + sweepDay()
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
			_ = os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// localAttemptScript is the shell that supervises a local attempt: it
// records who it is (recordID) and its pid, takes the lock when the worker could not (held: the
// worker passes it on fd 3), runs the command in a subshell, and records
// its exit status.
func localAttemptScript(cmd Command, ex, run string, held bool) string {
	var b strings.Builder
	b.WriteString(ex)
	b.WriteString(`_gr=` + shellQuote(run) + `; _gd=${_gr%.run}; _gb=${_gd%/*}
` + recordID + `_gI; echo $$ >>"$_gr"; `)
	if held {
		b.WriteString("exec 9>&3 3>&-; ")
	}
	b.WriteString(hostLock(cmd.Lock, held))
	b.WriteString(`( eval ` + shellQuote(cmd.Script) + ` ) </dev/null 9>&-; _gx=$?; echo $_gx >>"$_gr"; exit $_gx`)
	return b.String()
}

// runLocalAttempt runs the durable cmd as above. It returns errClaimed,
// having started nothing, when the attempt was started before.
func runLocalAttempt(ctx context.Context, cmd Command, base string) (Result, error) {
	res := Result{ExitCode: -1, Started: time.Now()}
	ex, err := checkedExports(cmd)
	if err != nil {
		return res, err
	}
	if cmd.Lock != "" {
		if err := validAttempt(cmd.Lock); err != nil {
			return res, fmt.Errorf("lock: %w", err)
		}
	}
	if err := beforeStart(cmd); err != nil {
		return res, err
	}
	// What the next attempts take is made once this one ended, so that
	// making it does not compete with this one for the machine.
	defer replenish(base)
	if err := claimAttempt(base, cmd.Attempt); err != nil {
		return res, err
	}
	sweepLocal(base)
	dir := base + "/" + cmd.Attempt
	if err := makeOutputFiles(base, dir); err != nil {
		return res, err
	}
	if w := takeWarm(localEnv(nil), cmd.Lock != ""); w != nil {
		err := w.hand(cmd, base, dir, ex)
		if !errors.Is(err, errWarmLost) {
			if err != nil {
				return res, err
			}
			return waitLocalAttempt(ctx, cmd, w.cmd, dir, res)
		}
		// nothing started: the attempt goes the cold way, claimed as it is
	}
	outFile, errFile, err := openOutputFiles(dir)
	if err != nil {
		return res, err
	}
	lock := takeLock(cmd)
	c := exec.Command("/bin/sh", "-c", localAttemptScript(cmd, ex, dir+".run", lock != nil))
	c.Stdout, c.Stderr, c.Stdin = outFile, errFile, nil
	c.Env = localEnv(cmd.Secrets)
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
	return waitLocalAttempt(ctx, cmd, c, dir, res)
}

// replenish makes warm shells and spare files for the next attempts, in
// the background.
func replenish(base string) {
	refillWarm(localEnv(nil))
	refillSpares(base)
}

// makeOutputFiles makes the attempt's output files and its id file: spares of base
// linked in, or new files (when a name is taken, what is there stays).
func makeOutputFiles(base, dir string) error {
	for _, name := range []string{dir + ".out", dir + ".err", dir + ".id"} {
		if placed, _ := placeSpare(base, name); !placed {
			f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				return fmt.Errorf("attempt output files: %w", err)
			}
			f.Close()
		}
	}
	return nil
}

// openOutputFiles opens the attempt's output files, to append.
func openOutputFiles(dir string) (out, errs *os.File, err error) {
	out, err1 := os.OpenFile(dir+".out", os.O_WRONLY|os.O_APPEND, 0)
	errs, err2 := os.OpenFile(dir+".err", os.O_WRONLY|os.O_APPEND, 0)
	if err := errors.Join(err1, err2); err != nil {
		out.Close()
		errs.Close()
		return nil, nil, fmt.Errorf("attempt output files: %w", err)
	}
	return out, errs, nil
}

// waitLocalAttempt follows the attempt's output files until its shell
// ends, or kills its process group on timeout or cancel.
func waitLocalAttempt(ctx context.Context, cmd Command, c *exec.Cmd, dir string, res Result) (Result, error) {
	rctx, cancel := runContext(ctx, cmd.Timeout)
	defer cancel()
	mask := newMasker(cmd.Secrets)
	out := &output{stream: Stdout, onLine: cmd.OnLine, mask: mask}
	errOut := &output{stream: Stderr, onLine: cmd.OnLine, mask: mask}
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
		pgid := make(chan marked, 1)
		pgid <- marked{pgid: c.Process.Pid, dir: dir}
		kerr := killAttempt(cmd.Attempt, pgid, waited)
		werr, killed = errors.Join(endErr(rctx), kerr), true
		<-waited
	}
	close(ended)
	<-followed
	<-followed
	out.flush()
	errOut.flush()
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
