package localexec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"golang.org/x/sys/unix"
)

// Warm shells. Most of a local durable attempt's time went into starting
// its supervising /bin/sh (an exec, the dynamic loader, the shell's own
// start), which a chain of nodes pays once per link. So the worker starts
// the supervising shells ahead of need: a warm shell is a /bin/sh in a
// process group of its own, its environment the worker's (localEnv), that
// waits on a pipe for one attempt. The attempt then costs the shell a
// subshell, as an attempt in a host agent does over SSH.
//
// A warm shell supervises exactly as the shell localAttemptScript starts
// does: the worker claims the attempt and makes its files first; the
// shell appends the command's output to them, records its pid (the process
// group) once it may start, runs the command in a subshell, records the
// exit status and exits with it, outliving the worker.
//
// The host lock must be held by the shell, so that it holds while the
// command runs even if the worker dies. Before the attempt is claimed, the
// shell opens the lock file on its fd 9 and says so; the worker takes that
// descriptor's open file description with pidfd_getfd(2) and locks it with
// flock(2), waiting while another holds it (see Local.takeTurn), so the
// shell's descriptor holds the lock. Where pidfd_getfd is not allowed, the
// shell is let go and attempts with a lock go the cold way.
//
// Anything that goes wrong before the shell is told to start (it died, it
// did not answer) costs the warm shell, not the attempt: it is killed and
// the attempt goes the cold way.
//
// A warm shell is /bin/sh reading its script from its stdin, a pipe only
// the worker writes (the command's secrets travel there as exports, not in
// the shell's environment), so that it reads the script in blocks rather
// than byte by byte as the read builtin does. The worker writes the script
// in two parts: warmPrelude, then, once the worker holds the lock for it
// and has claimed the attempt, warmRest.

// warmPrelude names the attempt and opens the lock file on fd 9, and
// answers "L" on fd 3; the shell then waits for more script. A shell that
// cannot open the lock file says so on its own stderr (nowhere: it has
// none), never in the attempt's files, and ends (the attempt then runs
// the cold way).
func warmPrelude(attempt, dir, lockPath string) string {
	s := "_ga=" + attempt + "; _gd=" + hostsh.Quote(dir) + "\n"
	if lockPath != "" {
		s += "_gk=" + hostsh.Quote(lockPath) + "; exec 9>>\"$_gk\"\n"
	}
	return s + "echo L >&3\n"
}

// warmRest sends the shell's output to the attempt's files, records who
// the shell is (hostsh.RecordID) and its pid, runs the command in a subshell
// (holding the lock, when the worker took it on the shell's fd 9, and
// named the attempt its holder) and records its exit status. It is one
// compound command: the shell runs none of it until it has read all of
// it, so a script cut short (the worker died writing it) runs nothing,
// rather than the command without recording its exit status.
func warmRest(cmd hostexec.Command, ex string) string {
	sec, _ := hostsh.Exports(cmd.Secrets) // checked by checkedExports
	var b strings.Builder
	b.WriteString("{\nexec >>\"$_gd.out\" 2>>\"$_gd.err\" 3>&-\n" + hostsh.RecordID + "_gI\necho $$ >>\"$_gd.run\"\n")
	b.WriteString("( " + sec + ex + "eval " + hostsh.Quote(cmdrun.Script(cmd)) + "\n) </dev/null 9>&-\n")
	b.WriteString("_gx=$?; echo $_gx >>\"$_gd.run\"; exit $_gx\n}\n")
	return b.String()
}

// warmShells is how many warm shells the worker keeps ready.
const warmShells = 4

// warmShell is a started shell waiting for its attempt.
type warmShell struct {
	cmd *exec.Cmd
	in  *os.File      // its stdin
	ans *bufio.Reader // its fd 3
	af  *os.File
	env []string // the environment it was started with
}

// warmPool holds a Local runner's warm shells.
type warmPool struct {
	mu      sync.Mutex
	idle    []*warmShell
	filling bool
	noPidfd atomic.Bool // pidfd_getfd is refused here: attempts with a lock go the cold way
}

// take returns a warm shell started with env, or nil. The pool fills up
// again, and shells of another environment are ended, once the attempt
// ended (prestart.replenish).
func (p *warmPool) take(env []string, lock bool) *warmShell {
	if lock && p.noPidfd.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.idle, func(w *warmShell) bool { return slices.Equal(w.env, env) })
	if i < 0 {
		return nil
	}
	w := p.idle[i]
	p.idle = slices.Delete(p.idle, i, i+1)
	return w
}

// refill starts filling the pool with shells of env, unless that is
// under way.
func (p *warmPool) refill(env []string) {
	p.mu.Lock()
	fill := !p.filling
	p.filling = true
	p.mu.Unlock()
	if fill {
		go p.fill(env)
	}
}

// fill ends the pool's shells of another environment, then starts shells
// of env until the pool holds warmShells.
func (p *warmPool) fill(env []string) {
	defer func() {
		p.mu.Lock()
		p.filling = false
		p.mu.Unlock()
	}()
	p.mu.Lock()
	var stale []*warmShell
	p.idle = slices.DeleteFunc(p.idle, func(w *warmShell) bool {
		if slices.Equal(w.env, env) {
			return false
		}
		stale = append(stale, w)
		return true
	})
	p.mu.Unlock()
	for _, w := range stale {
		w.discard()
	}
	for {
		p.mu.Lock()
		n := len(p.idle)
		p.mu.Unlock()
		if n >= warmShells {
			return
		}
		w, err := startWarm(env)
		if err != nil {
			return // the next attempt tries again; this one goes the cold way
		}
		p.mu.Lock()
		p.idle = append(p.idle, w)
		p.mu.Unlock()
	}
}

// startWarm starts a warm shell with env.
func startWarm(env []string) (*warmShell, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	ansR, ansW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	c := exec.Command("/bin/sh")
	c.Env, c.Stdin, c.ExtraFiles = env, inR, []*os.File{ansW} // fd 3
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = c.Start()
	inR.Close()
	ansW.Close()
	if err != nil {
		inW.Close()
		ansR.Close()
		return nil, err
	}
	return &warmShell{cmd: c, in: inW, ans: bufio.NewReader(ansR), af: ansR, env: env}, nil
}

// discard ends a warm shell that was never told to start: with its stdin
// closed it exits without running anything.
func (w *warmShell) discard() {
	w.in.Close()
	w.af.Close()
	_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	go func() { _ = w.cmd.Wait() }()
}

// errWarmLost: the warm shell could not be handed the attempt; nothing
// of it started.
var errWarmLost = errors.New("the warm shell did not take the attempt")

// warmAnswer bounds the wait for a warm shell's "L" (it comes within a
// millisecond or so): well inside the 5 s a re-attach waits for the pid of
// an attempt claimed elsewhere.
const warmAnswer = 2 * time.Second

// open names the attempt to the warm shell and, with a lock, has it open
// the lock file on its fd 9; it returns once the shell said it has. It
// returns errWarmLost when the shell did not answer: then it is discarded
// and nothing of the attempt started.
func (w *warmShell) open(attempt, dir, lockPath string) error {
	if _, err := io.WriteString(w.in, warmPrelude(attempt, dir, lockPath)); err != nil {
		w.discard()
		return fmt.Errorf("%w: %w", errWarmLost, err)
	}
	_ = w.af.SetReadDeadline(time.Now().Add(warmAnswer))
	if l, err := w.ans.ReadString('\n'); err != nil || l != "L\n" {
		w.discard()
		return fmt.Errorf("%w: it answered %q: %v", errWarmLost, l, err)
	}
	w.af.Close()
	return nil
}

// start tells the shell the rest of its script, which starts the attempt
// (claimed, with its files made).
func (w *warmShell) start(cmd hostexec.Command, ex string) error {
	_, err := io.WriteString(w.in, warmRest(cmd, ex))
	w.in.Close()
	if err != nil {
		// the shell is gone: what it read of the rest, if anything, was
		// cut short, and a cut command list does not run
		go func() { _ = w.cmd.Wait() }() // reap it
		return fmt.Errorf("%w on this machine: the attempt's shell ended: %w", hostexec.ErrSession, err)
	}
	return nil
}

// lockOnShell returns a descriptor of the open file description the warm
// shell pid has on its fd 9 (shellLock). Where this kernel or its seccomp
// profile refuses pidfds (not when the shell just ended: ESRCH), attempts
// with a lock go the cold way from then on.
func (p *warmPool) lockOnShell(pid int) (int, error) {
	fd, err := shellLock(pid)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS) || errors.Is(err, errors.ErrUnsupported) {
		p.noPidfd.Store(true)
	}
	return fd, err
}
