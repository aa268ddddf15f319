package sshexec

// Running a command over SSH: plain, or a durable attempt in a host
// agent or a session supervisor (re-attached after a lost connection),
// and the kill of its process group on the host.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"golang.org/x/crypto/ssh"
)

// reattachTries bounds how often a durable attempt whose connection ended
// before it reported an exit status is re-attached (reattachWait apart).
var (
	reattachTries = 5
	reattachWait  = time.Second
)

// The runner of an SSH host is an AttemptRunner.
var _ hostexec.AttemptRunner = (*sshRunner)(nil)

// Run runs the plain cmd, in a session of its own.
func (r *sshRunner) Run(ctx context.Context, cmd hostexec.Command) (hostexec.Result, error) {
	if cmd.Become {
		if err := r.checkBecome(ctx, r.entry(), becomeOf(cmd)); err != nil {
			return hostexec.Result{ExitCode: -1, Started: time.Now()}, err
		}
	}
	return r.run(ctx, hostexec.Attempt{Command: cmd})
}

// Settle settles the attempt cmd.ID on the host (settle.go; see
// hostexec.AttemptRunner.Settle): it starts nothing.
func (r *sshRunner) Settle(ctx context.Context, cmd hostexec.Attempt) (hostexec.Result, error) {
	if cmd.Become {
		if err := r.checkBecome(ctx, r.entry(), becomeOf(cmd.Command)); err != nil {
			return hostexec.Result{ExitCode: -1, Started: time.Now()}, err
		}
	}
	return r.settle(ctx, cmd)
}

// RunAttempt runs cmd as a durable attempt. One whose connection ends
// after it started, before it reported its exit status, goes on running on
// the host: RunAttempt re-attaches to it on a new connection (the output
// lines already handed to OnLine are not handed again) instead of
// reporting a failure, which a retry would have answered with a second
// copy of the command.
func (r *sshRunner) RunAttempt(ctx context.Context, cmd hostexec.Attempt) (hostexec.Result, error) {
	if cmd.Stdin != nil {
		return hostexec.Result{ExitCode: -1, Started: time.Now()}, cmdrun.ErrStdinDurable
	}
	if cmd.ID == "" { // not an attempt: run's session would run it plain
		return hostexec.Result{ExitCode: -1, Started: time.Now()}, hostsh.ValidAttempt(cmd.ID)
	}
	if cmd.Become {
		if err := r.checkBecome(ctx, r.entry(), becomeOf(cmd.Command)); err != nil {
			return hostexec.Result{ExitCode: -1, Started: time.Now()}, err
		}
	}
	lc := &lineCount{on: cmd.OnLine, delivered: map[hostexec.Stream]int{}}
	first := cmd
	first.OnLine = lc.first
	res, err := r.runDurable(ctx, first)
	ended := err // why the connection ended, when it did
	for try := 1; try <= reattachTries && errors.Is(err, errConnectionEnded) && !r.pool.isClosed(); try++ {
		ended = err
		r.pool.log.Warn("connection ended while an attempt ran; re-attaching to it", "host", r.address, "attempt", cmd.ID, "try", try)
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(reattachWait):
		}
		again := cmd
		again.BeforeStart = nil // it started: recorded already
		again.OnLine = lc.again()
		if cmd.Timeout > 0 {
			again.Timeout = max(cmd.Timeout-time.Since(res.Started), time.Millisecond)
		}
		started := res.Started
		res, err = r.run(ctx, again)
		res.Started = started
	}
	return res, reattachErr(ended, err)
}

// reattachErr is the error of a durable attempt whose re-attach failed
// with err after its host stopped answering (ended): both said, the host's
// silence first. Any other error is returned as it is.
func reattachErr(ended, err error) error {
	if err == nil || err == ended || errors.Is(err, errConnectionEnded) || !errors.Is(ended, hostexec.ErrStoppedAnswering) {
		return err
	}
	return fmt.Errorf("%w; re-attaching to the attempt: %w", ended, err)
}

// lineCount hands a durable attempt's output lines to on once, across the
// re-attaches that stream its output again from the start.
type lineCount struct {
	mu        sync.Mutex
	on        func(hostexec.Stream, string)
	delivered map[hostexec.Stream]int
}

func (l *lineCount) first(s hostexec.Stream, line string) {
	l.mu.Lock()
	l.delivered[s]++
	l.mu.Unlock()
	if l.on != nil {
		l.on(s, line)
	}
}

// again is the OnLine of a re-attach: it skips the lines already handed on.
func (l *lineCount) again() func(hostexec.Stream, string) {
	seen := map[hostexec.Stream]int{}
	return func(s hostexec.Stream, line string) {
		l.mu.Lock()
		seen[s]++
		fresh := seen[s] > l.delivered[s]
		if fresh {
			l.delivered[s]++
		}
		l.mu.Unlock()
		if fresh && l.on != nil {
			l.on(s, line)
		}
	}
}

// errConnectionEnded: the connection ended after the command started and
// before it reported an exit status.
var errConnectionEnded = errors.New("the connection ended before the command reported an exit status")

// runDurable runs a durable command in a host agent (agent.go), or in a
// session of its own: when the attempt exists on the host already (it
// re-attaches), or when no agent answers.
func (r *sshRunner) runDurable(ctx context.Context, cmd hostexec.Attempt) (hostexec.Result, error) {
	if r.noAgents {
		return r.run(ctx, cmd)
	}
	res := hostexec.Result{ExitCode: -1, Started: time.Now()}
	if err := cmdrun.CheckIDs(cmd); err != nil {
		return res, err
	}
	ex, err := cmdrun.CheckedExports(cmd.Command)
	if err != nil {
		return res, err
	}
	rctx, cancel := cmdrun.RunContext(ctx, cmd.Timeout)
	defer cancel()
	c := r.entry()
	if _, err := r.pool.client(rctx, c); err != nil {
		return res, err
	}
	res, err = r.runInAgent(rctx, c, cmd, ex)
	for try := 0; try < 2 && errors.Is(err, errAgentGone); try++ {
		cmd.BeforeStart = nil // called: the attempt is recorded
		res, err = r.runInAgent(rctx, c, cmd, ex)
	}
	if errors.Is(err, cmdrun.ErrClaimed) || errors.Is(err, errAgentGone) {
		cmd.BeforeStart, cmd.Timeout = nil, 0 // rctx bounds it
		return r.run(rctx, cmd)
	}
	return res, err
}

// sshText is what the host's shell runs for cmd, ex being its Env's
// exports: the secrets (read from stdin) before the environment and the
// script, or, for a durable command, the session supervisor around them.
func sshText(cmd hostexec.Attempt, ex string) (string, error) {
	if cmd.ID != "" {
		if err := cmdrun.CheckIDs(cmd); err != nil {
			return "", err
		}
		return hostsh.SuperviseScript(cmdrun.SupervisionOf(cmd, ex, true)), nil
	}
	text := ex + "exec /bin/sh -c " + hostsh.Quote(cmd.Script)
	if len(cmd.Secrets) > 0 {
		text = hostsh.ReadSecrets + text
	}
	return text, nil
}

// run runs cmd in a session of its own: a plain command when cmd.ID is
// "" (Run), else the session supervisor of the durable attempt (one with no
// agent to run it, or one re-attached to).
func (r *sshRunner) run(ctx context.Context, cmd hostexec.Attempt) (hostexec.Result, error) {
	res := hostexec.Result{ExitCode: -1, Started: time.Now()}
	ex, err := cmdrun.CheckedExports(cmd.Command)
	if err != nil {
		return res, err
	}
	rctx, cancel := cmdrun.RunContext(ctx, cmd.Timeout)
	defer cancel()
	stdin := io.Reader(eofReader{})
	if cmd.Stdin != nil {
		stdin = cmd.Stdin
	}
	if len(cmd.Secrets) > 0 {
		stdin = io.MultiReader(strings.NewReader(hostsh.SecretLine(cmd.Secrets)), stdin)
	}
	text, err := sshText(cmd, ex)
	if err != nil {
		return res, err
	}
	as := becomeOf(cmd.Command)
	remote := as.remote(text)
	if cmd.ID == "" {
		remote = "printf '" + hostsh.PIDMarker + "%s\\n' \"$$\"; " + text
		if as.on {
			remote = as.remote(remote)
		}
	}
	c := r.entry()
	sess, client, err := r.slotSession(rctx, c, func() (*ssh.Session, *ssh.Client, error) { return r.prepare(rctx, c, cmd.Command) })
	if err != nil {
		return res, err
	}
	defer func() { c.touch(); c.release() }()
	defer sess.Close()

	pgid := make(chan hostsh.Marked, 1)
	mask := cmdrun.NewMasker(cmd.Secrets, cmd.Mask...)
	out := &cmdrun.Output{Stream: hostexec.Stdout, OnLine: cmd.OnLine, Marker: hostsh.PIDMarker, OnMarker: hostsh.MarkerSink(pgid), Mask: mask}
	errOut := &cmdrun.Output{Stream: hostexec.Stderr, OnLine: cmd.OnLine, Mask: mask}
	sess.Stdout, sess.Stderr = out, errOut
	sess.Stdin = stdin
	if err := sess.Start(remote); err != nil {
		return res, fmt.Errorf("%w on %s: start: %w", hostexec.ErrSession, r.address, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sess.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-rctx.Done():
		// The group id is the command's first output line; a cancel right
		// after the start may come before it, so wait for it a little.
		var g hostsh.Marked
		var kerr error
		kill := true
		select {
		case g = <-pgid:
		case <-waited:
			waited <- nil // ended by itself meanwhile; nothing to kill
			kill = false
		case <-time.After(cmdrun.KillGrace): // the kill says the group is unknown
		}
		// Its session closed first gives its slot of sshd's MaxSessions
		// to the kill's; the kill, not the close, ends the command.
		_ = sess.Close()
		if kill {
			kerr = r.killRemote(client, g, as)
		}
		select {
		case <-waited:
		case <-time.After(cmdrun.KillGrace):
		}
		out.Flush()
		errOut.Flush()
		res.Ended, res.Stdout, res.Stderr = time.Now(), out.String(), errOut.String()
		return res, errors.Join(cmdrun.EndErr(rctx), kerr)
	}
	out.Flush()
	errOut.Flush()
	res.Ended, res.Stdout, res.Stderr = time.Now(), out.String(), errOut.String()
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case werr == nil:
		res.ExitCode = 0
	case errors.As(werr, &ee):
		res.ExitCode = ee.ExitStatus()
		if ee.Signal() != "" {
			res.ExitCode = 128 + signalNumber(ee.Signal())
		}
		if cmd.ID != "" && hostsh.Lost(res.ExitCode, res.Stderr) {
			return res, fmt.Errorf("%w: %s on %s", hostexec.ErrLost, cmd.ID, r.address)
		}
		if why, ok := hostsh.NoFiles(res.ExitCode, res.Stderr); cmd.ID != "" && ok {
			return res, fmt.Errorf("%w: %s on %s: %s", hostexec.ErrAttemptFiles, cmd.ID, r.address, why)
		}
	case errors.As(werr, &missing), errors.Is(werr, io.EOF):
		r.pool.drop(c, client)
		return res, r.ended(c, client)
	default:
		return res, fmt.Errorf("%w on %s: %w", hostexec.ErrSession, r.address, werr)
	}
	return res, nil
}

// killRemote ends the command's process group on the host (hostsh.KillScript),
// as the user the command runs as, and says whether that was confirmed.
// It uses a fresh session on the same connection (sshd ignores signal
// requests on sessions without a terminal).
func (r *sshRunner) killRemote(client *ssh.Client, m hostsh.Marked, as becomeAs) error {
	pgid := m.PGID
	if pgid <= 1 {
		return fmt.Errorf("%w: cannot kill the command on %s: its process group is unknown", hostexec.ErrKill, r.address)
	}
	return r.remoteKill(client, as, hostsh.KillScript(pgid, m.Dir), "process group "+strconv.Itoa(pgid))
}

// remoteKill runs a kill script on the host in a fresh session of client,
// as the user as, and says whether it confirmed (printed "gone") the end
// of what (the process group or attempt it kills).
//
// The whole of it, its session's opening too, is bounded by killWait: a
// host that hangs answers no channel open (x/crypto waits for the
// connection's end, which keepalives find after 45 s by default). A
// session sshd refuses (the connection at its MaxSessions, as when many
// attempts on the host are killed at once) is asked for again until then,
// as the other sessions end.
func (r *sshRunner) remoteKill(client *ssh.Client, as becomeAs, script, what string) error {
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	s, done, err := r.killSession(ctx, client)
	if err != nil {
		return fmt.Errorf("%w: %s on %s: %w", hostexec.ErrKill, what, r.address, err)
	}
	defer done()
	type result struct {
		out []byte
		err error
	}
	answer := make(chan result, 1)
	go func() {
		out, err := s.Output(as.remote(script))
		answer <- result{out, err}
	}()
	select {
	case res := <-answer:
		if strings.TrimSpace(string(res.out)) != "gone" {
			return fmt.Errorf("%w: %s on %s: %s %v", hostexec.ErrKill, what, r.address, strings.TrimSpace(string(res.out)), res.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %s on %s: no answer within %s", hostexec.ErrKill, what, r.address, killWait)
	}
}

// killWait bounds a kill on the host, from asking for its session to its
// answer.
const killWait = cmdrun.KillGrace + 10*time.Second

// killOpenWait is how long a kill waits for the host to answer its
// session's opening (a refusal is an answer).
var killOpenWait = 5 * time.Second

// killOwnAfter is how long sshd may refuse a kill's session on the
// command's connection before the kill dials a connection of its own:
// sshd's MaxSessions is a connection's, and a session it holds for an
// attempt still running (a host agent's, its shell waiting) is not
// given back when gantry closes it.
var killOwnAfter = time.Second

// killSession opens a kill's session of client, outside the connection's
// slots, asking again while sshd refuses it; past killOwnAfter, on a
// connection of its own. done closes what it opened. ctx bounds it all.
func (r *sshRunner) killSession(ctx context.Context, client *ssh.Client) (s *ssh.Session, done func(), err error) {
	refusedUntil := time.Now().Add(killOwnAfter)
	for wait := 5 * time.Millisecond; time.Now().Before(refusedUntil); wait = min(2*wait, 200*time.Millisecond) {
		octx, cancel := context.WithTimeout(ctx, killOpenWait)
		s, err = newSession(octx, client)
		cancel()
		if err != nil && errors.Is(octx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			// The host answers nothing: its connection goes (what runs on
			// it ends now, not when keepalives find it dead).
			r.pool.drop(r.entry(), client)
			// Not ErrStoppedAnswering: that says nothing of the attempt
			// ran there (unreachable), and it did.
			return nil, nil, fmt.Errorf("the host stopped answering: no answer to the kill's session within %s", killOpenWait)
		}
		var oce *ssh.OpenChannelError
		if err == nil || !errors.As(err, &oce) {
			return s, func() { _ = s.Close() }, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("sshd refused its session: %w", err)
		case <-time.After(wait):
		}
	}
	own, cerr := r.pool.connect(ctx, r.entry())
	if cerr != nil {
		return nil, nil, fmt.Errorf("sshd refused its session on the command's connection (%w), and a connection of its own failed: %w", err, cerr)
	}
	if s, err = newSession(ctx, own); err != nil {
		_ = own.Close()
		return nil, nil, fmt.Errorf("on a connection of its own: %w", err)
	}
	return s, func() { _ = s.Close(); _ = own.Close() }, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

func signalNumber(sig string) int {
	switch sig {
	case "HUP":
		return 1
	case "INT":
		return 2
	case "KILL":
		return 9
	case "TERM":
		return 15
	}
	return 0
}
