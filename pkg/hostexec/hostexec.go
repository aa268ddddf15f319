// Package hostexec runs shell commands on hosts: over SSH (one connection
// per host, reused, within the server's MaxSessions; host keys checked
// against known_hosts) or on the local machine (only where the worker
// allows it, with a small environment of its own rather than the
// worker's). A timeout or cancellation kills the command's whole process
// group, on the host too.
//
// A command's Secrets are environment variables kept out of every
// process's argv on the host (over SSH they travel on the session's
// stdin) and masked as *** in its output.
//
// This package is the contract: Runner (plain commands), AttemptRunner
// (durable attempts besides), Command, Attempt, Result and the errors a
// run can return. The runners are sshexec (SSH) and localexec (this
// machine); transport makes the runner of a host by its transport.
package hostexec

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// Errors a Run (or RunAttempt, Settle) can return (wrapped with detail). A
// command that ran and exited non-zero is not an error: Result.ExitCode
// says so.
var (
	ErrTimeout        = errors.New("timed out")
	ErrCancelled      = errors.New("cancelled")
	ErrHostKeyUnknown = errors.New("host key unknown")
	ErrHostKeyChanged = errors.New("host key changed")
	ErrConnect        = errors.New("cannot connect")
	ErrAuth           = errors.New("authentication failed")
	ErrSession        = errors.New("ssh session failed")
	// ErrSessionsRefused (with ErrSession): sshd kept refusing a new
	// session on the host's connection for SSHConfig.SessionWait, with
	// none of the connection's own sessions left to wait for; nothing
	// started.
	ErrSessionsRefused = errors.New("sshd refused a new session")
	// ErrDraining: the worker is stopping (Pool.Drain): the command was
	// not started, and nothing of it runs on the host.
	ErrDraining = errors.New("not started: the worker is stopping")
	// ErrKill: a command to be killed could not be confirmed gone.
	ErrKill = errors.New("kill not confirmed")
	// ErrStoppedAnswering (with ErrSession): the keepalives closed the
	// connection a command ran on, its host having answered none of them
	// for KeepaliveMissed intervals of SSHConfig.Keepalive.
	ErrStoppedAnswering = errors.New("the host stopped answering")
)

// Stream names an output stream.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// MaxTail is how much of each output stream a Result keeps (the end).
const MaxTail = hostsh.MaxTail

// MaxLine bounds one line passed to OnLine; longer lines are cut.
const MaxLine = 4096

// Command is one shell script to run: what any command has. A durable
// command is an Attempt, run by an AttemptRunner.
type Command struct {
	Script  string
	Env     map[string]string // names must be [A-Za-z_][A-Za-z0-9_]*
	Timeout time.Duration     // 0: no limit beyond ctx
	// Secrets are environment variables like Env whose values must stay
	// out of sight: they never appear in a process's argv (ps,
	// /proc/*/cmdline on the host), and every value is replaced by ***
	// in the output (OnLine's lines, Result.Stdout and Stderr). Over SSH
	// they reach the host's shell on the session's stdin, which it reads
	// with a builtin before the command starts (the command itself still
	// sees an empty stdin); locally they are put in the process's
	// environment. Names are checked as Env's and may not also be in Env;
	// a value may not be empty (there would be nothing to mask) nor hold
	// a NUL byte. What a command does with a secret (prints it encoded,
	// passes it as an argument to a program) is up to it.
	Secrets map[string]string
	// OnLine, when set, receives each output line as it is produced.
	OnLine func(s Stream, line string)
	// BeforeStart, when set, is called right before the process starts
	// (over SSH once the command's session, or its host agent, is open:
	// never while the command waits for a session slot or for a session
	// sshd refuses). If it fails, nothing starts and Run (or RunAttempt)
	// returns its error. Callers record an attempt here, so that an attempt is counted
	// (and announced) exactly when a process was started.
	BeforeStart func() error
	// Become runs the command through sudo -n on its host, as BecomeUser
	// (root when empty): see sshexec/become.go. Over SSH only.
	Become     bool
	BecomeUser string
	// Stdin, for a command that is not durable (not an Attempt's), is what
	// its script reads on its standard input: over SSH it is streamed on the
	// session (after the secrets' line), so its size is not bounded by
	// memory or by a command line. Nil: an empty stdin.
	Stdin io.Reader
	// Mask are more values hidden as *** in the output, as Secrets' are
	// (line by line), without being in the command's environment: the
	// contents of secret files a node places.
	Mask []string
}

// Attempt is a durable command (see internal/hostsh/attempt.go): it runs
// under a supervisor on the host that records its output and exit status
// under its ID, and running the same Attempt again
// (AttemptRunner.RunAttempt) waits for that command or reads its result
// instead of starting it again.
type Attempt struct {
	// Command is what it runs; its Stdin must be nil (a durable command
	// may be re-attached to, and its stdin is the supervisor's).
	Command
	// ID is the attempt's id on its host (the characters hostsh.ValidAttempt
	// allows): its output and exit status are recorded under it.
	ID string
	// Lock names a lock on the host that the command holds while it runs:
	// commands with the same Lock never run at once on one host, across
	// executors and workflows (flock). The attempt takes it before it
	// claims its id on the host: one that has to wait for it has started
	// nothing yet (see Turn).
	Lock string
	// Mark, with Lock, is a word (the characters of an attempt id) that
	// the attempt leaves beside its id in the lock's holder file once it
	// holds the lock and starts: what it is, for the attempts that take
	// the lock after it (the executor marks the node's operation and
	// spec hash).
	Mark string
	// Turn, with Lock, decides whether the attempt starts once it holds
	// its lock, before anything of it starts on the host. It is asked
	// when the attempt that held the lock last left the same Mark and
	// recorded exit status 0, and when the attempt had to wait for the
	// lock. Returning false starts nothing: the lock is let go, the
	// attempt id stays unused on the host, and RunAttempt returns
	// ErrDeclined. An attempt that had to wait starts only once its worker
	// has said so (Turn, or nothing to ask and ctx not done): a worker that
	// is gone or gave up meanwhile leaves nothing to start later. Over SSH
	// an attempt is asked only in a host agent (sshexec/agent.go); in a
	// session of its own it starts once it holds the lock, as before.
	Turn func(Holder) bool
	// Output gives the command GANTRY_OUTPUT: a file made empty for the
	// attempt, which ReadOutput reads back (outputfile.go).
	Output bool
}

// Holder is the attempt that held a host lock last, as an attempt that
// has just taken the lock finds it (Attempt.Turn).
type Holder struct {
	Attempt  string // its id; "" when the lock was never held (or its holder file is unreadable)
	Mark     string // the Mark it left
	ExitCode int    // its recorded exit status; -1 when none is recorded
	Waited   bool   // the attempt being asked had to wait for the lock
}

// ErrDeclined: Attempt.Turn said the attempt is not to start; nothing of
// it started on the host.
var ErrDeclined = errors.New("not started: declined at its turn")

// ErrNotStarted wraps a BeforeStart failure.
var ErrNotStarted = errors.New("not started")

// Result is how a command ended.
type Result struct {
	ExitCode int // -1 when there is no exit status (killed, lost)
	Stdout   string
	Stderr   string
	Started  time.Time
	Ended    time.Time
}

// Runner runs commands on one host: plain commands, nothing durable.
type Runner interface {
	Run(ctx context.Context, cmd Command) (Result, error)
}

// AttemptRunner runs durable attempts on one host, besides plain
// commands. Each transport implements it in its own way (over SSH a host
// agent or a session supervisor on the host, locally a host lock the
// worker holds), which is why durability is a port of its own rather
// than a wrapper over Run.
type AttemptRunner interface {
	Runner
	// RunAttempt runs a as a durable attempt: it starts it on the host
	// under a supervisor, or, when a.ID was started there before,
	// re-attaches to it (waits for it and hands on its output) or reads
	// its recorded result, without starting it again.
	RunAttempt(ctx context.Context, a Attempt) (Result, error)
	// Settle settles the attempt a.ID (see Settling an attempt below): it
	// starts nothing, ends the attempt on its host if it still runs, as a
	// cancel would, and says how the attempt ended. Of a only ID is used,
	// Env, for where the attempt's files are (its GANTRY_ATTEMPTS or
	// HOME), Become and BecomeUser, for whose files they are, and Secrets
	// and Mask, to mask the output read back; Script, OnLine,
	// BeforeStart, Timeout, Lock, Mark, Turn and Output are not.
	Settle(ctx context.Context, a Attempt) (Result, error)
}

// Settling an attempt. A durable attempt outlives the worker that
// started it, so a worker may find an attempt recorded as running that
// nobody follows any more, in a run that has been cancelled meanwhile (or
// that a retry has superseded). Running the same Attempt again
// (RunAttempt) would re-attach to it, but would also start it if it never
// started there. AttemptRunner.Settle starts nothing: in one session it
// ends the attempt if it still runs, as a cancel does (SIGTERM, SIGKILL
// after 2 s, confirmed; the kill's status, 143 or 137, recorded as the
// attempt's exit status), and says how the attempt ended:
//
//   - it had ended by itself: its recorded exit status, no error (an
//     attempt that succeeded while nobody followed it is a success);
//   - this call (or an earlier kill by gantry) killed it: the kill's
//     status and ErrCancelled;
//   - it never started on the host (or a cancel claimed it before it
//     started: see hostsh.CancelScript): ErrNoAttempt;
//   - it ended without recording an exit status: ErrLost;
//   - it could not be confirmed gone: ErrKill.
//
// Result.Stdout and Stderr are the last MaxTail bytes of its output
// files, with the command's secrets masked.

// ErrNoAttempt: a settled attempt never started on its host (it has no
// run file there).
var ErrNoAttempt = errors.New("the attempt never started on the host")

// ErrBecome: sudo on the host does not run commands as asked (it wants a
// password, is not installed, or refuses); nothing of the command started.
var ErrBecome = errors.New("become")

// ErrIdentity: a host's identity file cannot be used (missing,
// unreadable, not a key, encrypted with no agent holding it, or a
// certificate beside it that does not fit it).
var ErrIdentity = errors.New("identity file unusable")

// ErrHostKeyRevoked: the host's key, or its certificate's CA, is marked
// @revoked in known_hosts.
var ErrHostKeyRevoked = errors.New("host key revoked")

// ErrLost: an attempt's command ended on the host without recording an
// exit status (it was killed outside gantry, or the host restarted).
var ErrLost = errors.New("attempt lost on the host")

// ErrAttemptFiles: the attempt's files could not be made on the host (its
// attempts directory, GANTRY_ATTEMPTS or ~/.gantry/attempts, cannot be
// made or written by the user the command runs as); nothing started.
var ErrAttemptFiles = errors.New("the attempt's files cannot be made on the host")
