package sshexec

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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

// Host agents. Over SSH a durable attempt runs in a host agent: a small
// shell loop (agentScript) in a session of its own that runs one attempt
// after another, as Mitogen does for Ansible. An attempt then costs the
// host what its supervision needs (a subshell and, with a lock, flock)
// rather than a new sshd session and shell, the cost a plain `ssh host
// cmd` pays per command. Each agent holds one of its connection's session
// slots; idle agents wait in the connection's pool and give their slot up
// to a plain session that needs one, and all of them end when sshd
// refuses a new session on the connection (sshRunner.session).
//
// An agent keeps every guarantee of the session supervisor (internal/hostsh/attempt.go):
// it claims the attempt with the same atomic create of its run file, the
// command's output goes to the attempt's files on the host, and its exit
// status is recorded in the run file. The agent is its session's leader,
// so the process group recorded is the agent's: a kill ends the agent with
// the attempt, and the pool starts a new one. An agent whose connection
// ends goes on with its attempt, records it, and exits; Run re-attaches to
// the attempt through a session, as for the session supervisor.
//
// Output is not piped through a tee: a command that ends within
// followAfter sends its output back with its exit status (one cat per
// non-empty stream). One that runs longer is followed live from its files
// by a follow session (followScript), whose tails the agent ends when the
// attempt ends.

// followAfter is how long an attempt runs before its output is followed
// live from its files on the host.
var followAfter = 150 * time.Millisecond

// agentMarker starts an agent's first line: its pid, which is the process
// group of every attempt it runs.
const agentMarker = "__gantry_agent "

// agentScript is the agent: it reads requests on stdin, each a line
// "<n> <header>" followed by n lines of text. The header (shell
// assignments the client writes) sets _ga (the attempt), _gk (the lock,
// or empty), _gm (the attempt's mark, or empty), _gT (1: ask the client
// when the lock's last holder left the same mark and exit status 0), _gb
// (the attempts directory), _gz (the request's nonce), _gv (the token a
// follow session of the request writes: not the nonce, which the command
// must not learn) and _gw (today's sweep stamp). The text is the
// command's environment and script, run in a subshell with the output
// going to the attempt's files.
//
// The agent answers "R" when the attempt exists already (the client
// re-attaches). Otherwise it takes the lock first, before it claims the
// attempt: when it has to wait it says "W <holder>" (the attempt that
// holds the lock) and waits. Holding the lock, it reads the holder file
// (the last attempt to hold it and its mark) and that attempt's exit
// status, names itself there (so one that waits now says for whom), and
// asks "T <waited 0|1> <exit status|-> <attempt|-> <mark|->" when it
// waited, or when _gT is set and the last holder left this mark and exit
// status 0; it starts only on the answer "run", and otherwise puts the
// holder file back as it was, lets the lock go and answers "K": nothing of
// the attempt started (a client that is gone answers nothing: an agent
// left waiting for a lock by a dropped connection starts nothing once it
// gets it). Then it claims the attempt (the atomic create of its run file;
// "R" when another did first), makes its output files, answers "S <pgid>
// <dir>" and starts the command. Once the attempt ended,
// it sends the output the client does not follow, then "<nonce> <exit
// status>" on stdout and "<nonce>" on stderr, each on a line of its own
// after a newline. Writes to a connection that is gone fail without
// ending the agent (SIGPIPE ignored; the command gets the default back).
// What goes wrong with the lock is kept out of the attempt's output (an
// attempt that cannot take its lock runs without it, as before).
var agentScript = `trap '' PIPE
` + hostsh.RecordID + `_gn() { set -C; echo $$ 2>/dev/null >"$_gd.run"; _gc=$?; set +C; return $_gc; }
printf '` + agentMarker + `%s\n' "$$"
while IFS= read -r _gq; do
  _gl=${_gq%% *}; _gh=${_gq#* }; _gt=; _gi=0
  while [ "$_gi" -lt "$_gl" ] && IFS= read -r _gr; do _gt="$_gt$_gr
"; _gi=$((_gi+1)); done
  [ "$_gi" -eq "$_gl" ] || exit 0
  _gk=; _gm=; _gT=; eval "$_gh"; _gd="$_gb/$_ga"; _gL="$_gb/../locks/$_gk"; _gA=run
  if [ -d "$_gb" ]; then ` + hostsh.Sweep("$_gw") + `; fi 2>/dev/null
  if [ -e "$_gd.run" ]; then _gA=claimed
  elif [ -n "$_gk" ] && { [ -d "$_gb/../locks" ] || mkdir -p -m 700 "$_gb" "$_gb/../locks"; } && command exec 9>>"$_gL"; then
    _gW=0
    flock -n 9 || { _gP=; read -r _gP _gM <"$_gL.holder"; [ -n "$_gP" ] || { sleep 0.2; read -r _gP _gM <"$_gL.holder"; }; printf 'W %s\n' "$_gP"; _gW=1; flock 9; }
    _gS=; _gP=; _gM=; _gE=; IFS= read -r _gS <"$_gL.holder"; _gP=${_gS%% *}
    case $_gS in *' '*) _gM=${_gS#* } ;; esac
    case $_gP in ''|.*|*/*) _gP= ;; *) { read -r _gE; read -r _gE; } <"$_gb/$_gP.run" ;; esac
    echo "$_ga${_gm:+ $_gm}" >"$_gL.holder"
    if [ "$_gW" = 1 ] || { [ -n "$_gT" ] && [ -n "$_gm" ] && [ "$_gM" = "$_gm" ] && [ "$_gE" = 0 ]; }; then
      printf 'T %s %s %s %s\n' "$_gW" "${_gE:--}" "${_gP:--}" "${_gM:--}"
      IFS= read -r _gA || _gA=
      [ "$_gA" = run ] || { printf '%s\n' "$_gS" >"$_gL.holder"; exec 9>&-; _gA=declined; }
    fi
  fi 2>/dev/null
  if [ "$_gA" = run ] && { _gn || { [ ! -e "$_gd.run" ] && mkdir -p -m 700 "$_gb" "$_gb/../locks" 2>/dev/null && _gn; }; }; then
    _gI; : >>"$_gd.out"; : >>"$_gd.err"
    printf 'S %s %s\n' "$$" "$_gd"
    ( trap - PIPE; unset _gq _gh _gz _gv _gH; eval "$_gt" ) </dev/null >>"$_gd.out" 2>>"$_gd.err" 9>&-
    _gx=$?
    echo "$_gx" >>"$_gd.run"
    exec 9>&-
    _gf=; _gy=; [ -e "$_gd.f" ] && read -r _gf _gy 2>/dev/null <"$_gd.f"
    [ -n "$_gf" ] && kill "$_gf" 2>/dev/null
    [ "$_gy" = "$_gv" ] || { [ -s "$_gd.out" ] && cat "$_gd.out"; [ -s "$_gd.err" ] && cat "$_gd.err" >&2; }
    printf '\n%s %s\n' "$_gz" "$_gx"; printf '\n%s\n' "$_gz" >&2
  elif [ "$_gA" = declined ]; then
    printf 'K\n'
  else
    exec 9>&-
    printf 'R\n'
  fi
  unset _gt _gr
done
`

// followScript streams an attempt's output files (dir) from the start
// until the attempt ends: its exit status is recorded, or the process
// group pgid is gone. The waiter it writes to <dir>.f, with the follow
// token of the request it follows, is ended by the agent at once when the attempt
// ends; without it (the agent was killed), the waiter notices within a
// second. token is the request's follow token (never its nonce: the
// command can read this script's argv and the file). The agent makes the
// output files before it says the attempt started, so they are there to
// follow; what tail itself would complain about goes nowhere, never into
// the attempt's output.
func followScript(dir string, pgid int, token string) string {
	return `echo ` + followMarker + `; _gd=` + hostsh.Quote(dir) + `; _gp=` + strconv.Itoa(pgid) + `
_ge() { _gx=; { read -r _gx; read -r _gx; } 2>/dev/null <"$_gd.run"; [ -n "$_gx" ]; }
( until _ge || ! kill -0 "$_gp" 2>/dev/null; do sleep 1; done ) & _gw=$!
echo "$_gw ` + token + `" >"$_gd.f"
_ge && kill "$_gw" 2>/dev/null
tail -c +1 -s 0.05 -f --pid="$_gw" "$_gd.out" 2>/dev/null & _gt=$!
tail -c +1 -s 0.05 -f --pid="$_gw" "$_gd.err" >&2 2>/dev/null
wait $_gt
`
}

// agent is a running host agent, idle or running one attempt.
type hostAgent struct {
	client *ssh.Client
	sess   *ssh.Session
	in     io.WriteCloser
	out    *bufio.Reader
	errs   *bufio.Reader
	pgid   int
	as     becomeAs // whom it runs as
}

func (a *hostAgent) close() { _ = a.sess.Close() }

// startAgent starts an agent running as as on c's connection client (its
// slot taken).
func (r *sshRunner) startAgent(ctx context.Context, c *conn, as becomeAs) (*hostAgent, error) {
	sess, client, err := r.session(ctx, c)
	if err != nil {
		return nil, err
	}
	a := &hostAgent{client: client, sess: sess, as: as}
	in, err1 := sess.StdinPipe()
	out, err2 := sess.StdoutPipe()
	errs, err3 := sess.StderrPipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		a.close()
		return nil, fmt.Errorf("%w on %s: agent: %w", hostexec.ErrSession, r.address, err)
	}
	a.in, a.out, a.errs = in, bufio.NewReader(out), bufio.NewReader(errs)
	if err := sess.Start(as.remote(agentScript)); err != nil {
		a.close()
		return nil, fmt.Errorf("%w on %s: start the agent: %w", hostexec.ErrSession, r.address, err)
	}
	type first struct {
		line string
		err  error
	}
	ch := make(chan first, 1)
	go func() {
		l, err := a.out.ReadString('\n')
		ch <- first{l, err}
	}()
	select {
	case f := <-ch:
		pid, ok := strings.CutPrefix(strings.TrimSpace(f.line), strings.TrimSpace(agentMarker))
		n, perr := strconv.Atoi(strings.TrimSpace(pid))
		if f.err != nil || !ok || perr != nil || n <= 1 {
			a.close()
			return nil, fmt.Errorf("%w on %s: the agent did not start: %q %v", hostexec.ErrSession, r.address, f.line, f.err)
		}
		a.pgid = n
		return a, nil
	case <-ctx.Done():
		a.close()
		return nil, cmdrun.EndErr(ctx)
	}
}

// takeAgent returns an idle agent of c's live connection that runs as
// as, or starts one in a free slot; it waits for either within the
// sessions the connection allows. An idle agent that runs as another user
// is ended: its slot is free for a new one.
func (r *sshRunner) takeAgent(ctx context.Context, c *conn, as becomeAs) (*hostAgent, error) {
	for {
		if r.pool.isDraining() {
			return nil, r.drainErr()
		}
		select { // an idle one first
		case a := <-c.idle:
			if c.fits(a, as) {
				return a, nil
			}
			continue
		default:
		}
		select {
		case a := <-c.idle:
			if c.fits(a, as) {
				return a, nil
			}
		case c.sem <- struct{}{}:
			a, err := r.startAgent(ctx, c, as)
			if errors.Is(err, errOverLimit) {
				continue // the slot went to the connection: wait again
			}
			if err != nil {
				c.release()
				return nil, err
			}
			return a, nil
		case <-ctx.Done():
			return nil, cmdrun.EndErr(ctx)
		case <-r.pool.draining:
			return nil, r.drainErr()
		}
	}
}

// fits says whether a runs as as on c's live connection within its
// limit; one that does not is ended, and its slot given back.
func (c *conn) fits(a *hostAgent, as becomeAs) bool {
	if a.as == as && c.current() == a.client && !c.over() {
		return true
	}
	a.close()
	c.release()
	return false
}

// over says whether more slots are handed out than c's limit allows.
func (c *conn) over() bool {
	c.lim.Lock()
	defer c.lim.Unlock()
	return c.reserved < cap(c.sem)-c.limit
}

// putAgent returns an agent to the pool, its slot with it; beyond the
// connection's limit it is ended instead, its slot going to the
// connection.
func (c *conn) putAgent(a *hostAgent) {
	c.touch()
	if c.over() {
		a.close()
		c.release()
		return
	}
	c.idle <- a // never blocks: every agent holds one of the cap(c.sem) slots
}

// dropAgent ends an agent and gives its slot back.
func (c *conn) dropAgent(a *hostAgent) {
	a.close()
	c.touch()
	c.release()
}

// acquire takes a session slot for a plain session: a free one, or one an
// idle agent gives up, within the sessions the connection allows.
func (r *sshRunner) acquire(ctx context.Context, c *conn) error {
	for {
		if r.pool.isDraining() {
			return r.drainErr()
		}
		select {
		case c.sem <- struct{}{}:
			return nil
		case a := <-c.idle:
			a.close() // its slot is the caller's now, or the connection's
			if !c.reserve() {
				return nil
			}
		case <-ctx.Done():
			return cmdrun.EndErr(ctx)
		case <-r.pool.draining:
			return r.drainErr()
		}
	}
}

// current is c's live client (nil: none).
func (c *conn) current() *ssh.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.client
}

// agentReq is a request to an agent: what is written on its stdin, the
// nonce that ends its answer, and the token its follow session writes.
type agentReq struct {
	text, nonce, token string
}

// agentRequest is the request that runs cmd (its text: secrets, then the
// environment, then the script) in an agent.
func agentRequest(cmd hostexec.Attempt, ex string) (agentReq, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return agentReq{}, err
	}
	nonce, token := hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	sec, err := hostsh.Exports(cmd.Secrets)
	if err != nil {
		return agentReq{}, err
	}
	turn := ""
	if cmd.Turn != nil {
		turn = "1"
	}
	header := "_ga=" + cmd.ID + "; _gk=" + cmd.Lock + "; _gm=" + cmd.Mark + "; _gT=" + turn + "; " + cmdrun.AttemptsBase(cmd.Command) + "; _gz=" + nonce + "; _gv=" + token + "; _gw=" + hostsh.SweepDay()
	text := sec + ex + "eval " + hostsh.Quote(cmdrun.Script(cmd)) + "\n"
	return agentReq{text: strconv.Itoa(strings.Count(text, "\n")) + " " + header + "\n" + text, nonce: nonce, token: token}, nil
}

// agentRun is one attempt that an agent started: the connection and the
// agent it runs in, its process group and files, its request, and where
// its output goes.
type agentRun struct {
	c           *conn
	a           *hostAgent
	m           hostsh.Marked
	req         agentReq
	out, errOut *cmdrun.Output
}

// errAgentGone: the agent ended before it answered a request; nothing of
// the attempt is known to have started.
var errAgentGone = errors.New("the agent ended before it answered")

// runInAgent runs the durable cmd in an agent of c. It returns errClaimed
// when the attempt was started before (re-attach to it through a
// session), errAgentGone when the agent ended without answering, and
// errConnectionEnded when it ended after starting the attempt.
func (r *sshRunner) runInAgent(rctx context.Context, c *conn, cmd hostexec.Attempt, ex string) (hostexec.Result, error) {
	res := hostexec.Result{ExitCode: -1, Started: time.Now()}
	req, err := agentRequest(cmd, ex)
	if err != nil {
		return res, err
	}
	a, err := r.takeAgent(rctx, c, becomeOf(cmd.Command))
	if err != nil {
		return res, err
	}
	if err := cmdrun.BeforeStart(cmd.Command); err != nil {
		c.putAgent(a)
		return res, err
	}
	if _, err := io.WriteString(a.in, req.text); err != nil {
		c.dropAgent(a)
		return res, errAgentGone
	}
	mask := cmdrun.NewMasker(cmd.Secrets, cmd.Mask...)
	out := &cmdrun.Output{Stream: hostexec.Stdout, OnLine: cmd.OnLine, Mask: mask}
	errOut := &cmdrun.Output{Stream: hostexec.Stderr, OnLine: cmd.OnLine, Mask: mask}
	started, err := r.awaitStart(rctx, c, a, cmd, errOut)
	if err != nil {
		errOut.Flush()
		res.Ended, res.Stderr = time.Now(), errOut.String() // the wait for the lock, said
		return res, err
	}
	m := hostsh.Marked{PGID: a.pgid, Dir: strings.TrimSpace(strings.SplitN(started, " ", 3)[2])}
	code, werr := r.awaitAgent(rctx, &agentRun{c: c, a: a, m: m, req: req, out: out, errOut: errOut})
	out.Flush()
	errOut.Flush()
	res.Ended, res.Stdout, res.Stderr = time.Now(), out.String(), errOut.String()
	if werr != nil {
		return res, werr
	}
	c.putAgent(a)
	res.ExitCode = code
	return res, nil
}

// awaitStart reads the agent's answers to a request until the attempt
// started ("S <pgid> <dir>", returned). On the way the agent may say it
// waits for the host lock ("W <holder>": the waiting line goes to errOut,
// as the session supervisor prints it) and ask whether the attempt is to
// start ("T ...": answered from cmd.Turn; "no" once rctx is done). It
// returns errClaimed ("R": re-attach), ErrDeclined ("K" after Turn said
// no), errAgentGone, or rctx's error: then the agent is dropped, and one
// still waiting for the lock starts nothing once it gets it (its question
// goes unanswered).
func (r *sshRunner) awaitStart(rctx context.Context, c *conn, a *hostAgent, cmd hostexec.Attempt, errOut *cmdrun.Output) (string, error) {
	type answer struct {
		line string
		err  error
	}
	lines := make(chan answer, 1)
	var declined error
	for {
		go func() {
			l, err := a.out.ReadString('\n')
			lines <- answer{l, err}
		}()
		var got answer
		select {
		case got = <-lines:
		case <-rctx.Done():
			// The agent may have read the request and be about to start
			// the attempt: closing its session does not stop it.
			// Dropped first (its read ends with the session), its session
			// is free for the cancel's.
			c.dropAgent(a)
			kerr := r.cancelStart(a.client, cmd)
			return "", errors.Join(cmdrun.EndErr(rctx), kerr)
		}
		l := got.line
		switch {
		case got.err != nil:
			c.dropAgent(a)
			return "", errAgentGone
		case strings.HasPrefix(l, "S "):
			return l, nil
		case l == "R\n":
			c.putAgent(a)
			return "", cmdrun.ErrClaimed
		case l == "K\n" && declined != nil:
			c.putAgent(a)
			return "", declined
		case strings.HasPrefix(l, "W "):
			_, _ = errOut.Write([]byte(cmdrun.WaitingLine(strings.TrimSpace(l[2:]))))
			continue
		case strings.HasPrefix(l, "T "):
			h := parseTurn(l)
			start := rctx.Err() == nil && (cmd.Turn == nil || cmd.Turn(h))
			if start && rctx.Err() != nil {
				start = false // it ended while Turn decided
			}
			ans := "run\n"
			if !start {
				ans, declined = "no\n", hostexec.ErrDeclined
				if rctx.Err() != nil {
					declined = cmdrun.EndErr(rctx)
				}
			}
			if _, err := io.WriteString(a.in, ans); err != nil {
				c.dropAgent(a)
				return "", errAgentGone
			}
			continue
		}
		c.dropAgent(a)
		return "", fmt.Errorf("%w on %s: the agent answered %q", hostexec.ErrSession, r.address, l)
	}
}

// cancelStart makes sure the attempt cmd asked an agent to start, which
// did not say it started, is not running on the host: it never starts
// (hostsh.CancelScript claims it first), or it is killed; as killRemote does, in
// a fresh session of the connection client.
func (r *sshRunner) cancelStart(client *ssh.Client, cmd hostexec.Attempt) error {
	return r.remoteKill(client, becomeOf(cmd.Command), hostsh.CancelScript(cmdrun.AttemptsBase(cmd.Command), cmd.ID), "attempt "+cmd.ID)
}

// parseTurn reads an agent's question "T <waited> <exit|-> <attempt|->
// <mark|->".
func parseTurn(l string) hostexec.Holder {
	f := strings.SplitN(strings.TrimSpace(l), " ", 5)
	for len(f) < 5 {
		f = append(f, "-")
	}
	h := hostexec.Holder{Waited: f[1] == "1", ExitCode: -1}
	if n, err := strconv.Atoi(f[2]); err == nil {
		h.ExitCode = n
	}
	if f[3] != "-" {
		h.Attempt = f[3]
	}
	if f[4] != "-" {
		h.Mark = f[4]
	}
	return h
}

// ending is where an attempt's output goes once the agent sends it at
// the attempt's end: straight to the output when no follow session was
// started, else into a buffer, used only if the follow session never ran
// (the agent sends the output unless the follow session told it that it
// streams it).
type ending struct {
	mu        sync.Mutex
	ended     bool // the agent sent something after the start: the attempt ended
	following bool // a follow session was started
	bufs      map[*cmdrun.Output]*bytes.Buffer
}

// to returns where o's share of the agent's answer goes.
func (e *ending) to(o *cmdrun.Output) io.Writer {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ended = true
	if !e.following {
		return o
	}
	if e.bufs == nil {
		e.bufs = map[*cmdrun.Output]*bytes.Buffer{}
	}
	if e.bufs[o] == nil {
		e.bufs[o] = &bytes.Buffer{}
	}
	return e.bufs[o]
}

// follow says whether a follow session may start: not once the attempt
// ended.
func (e *ending) follow() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.ended {
		e.following = true
	}
	return e.following
}

// settle hands the buffered answer on when the follow session did not run.
func (e *ending) settle(ran bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for o, b := range e.bufs {
		if !ran {
			_, _ = o.Write(b.Bytes())
		}
	}
	e.bufs = nil
}

// awaitAgent waits for the agent's answer to an attempt it started: its
// output (or a follow session's) and exit status. On timeout or cancel it
// kills the attempt's process group, the agent with it.
func (r *sshRunner) awaitAgent(rctx context.Context, run *agentRun) (int, error) {
	c, a, nonce := run.c, run.a, run.req.nonce
	type answer struct {
		code int
		err  error
	}
	e := &ending{}
	stdout, stderr := make(chan answer, 1), make(chan error, 1)
	go func() {
		code, err := readUntil(a.out, nonce+" ", func() io.Writer { return e.to(run.out) })
		stdout <- answer{code, err}
	}()
	go func() {
		_, err := readUntil(a.errs, nonce, func() io.Writer { return e.to(run.errOut) })
		stderr <- err
	}()
	var fol *follower
	timer := time.NewTimer(followAfter)
	defer timer.Stop()
	var got answer
	for waiting := true; waiting; {
		select {
		case got = <-stdout:
			waiting = false
		case <-timer.C:
			if e.follow() {
				fol = r.startFollow(rctx, run)
			}
		case <-rctx.Done():
			// The agent dropped first (the attempt runs on without it)
			// frees its session of sshd's MaxSessions for the kill's (a
			// kill refused one dials a connection of its own). The follow
			// session, closed with rctx, ends once the kill ended the
			// attempt; on a host that answers nothing the kill drops the
			// connection, and it ends then.
			c.dropAgent(a)
			kerr := r.killRemote(a.client, run.m, a.as)
			fol.stop()
			return -1, errors.Join(cmdrun.EndErr(rctx), kerr)
		}
	}
	if got.err == nil {
		select {
		case got.err = <-stderr:
		case <-rctx.Done():
			got.err = cmdrun.EndErr(rctx)
		}
	}
	e.settle(fol.end())
	if got.err != nil {
		c.dropAgent(a)
		if errors.Is(got.err, io.ErrUnexpectedEOF) {
			return -1, r.ended(c, a.client)
		}
		return -1, got.err
	}
	return got.code, nil
}

// readUntil copies what the agent sends on one stream at an attempt's
// end to dst() (called at the first byte), up to the line
// "<newline><sentinel>[exit status]", and returns the exit status after
// the sentinel (stdout's).
func readUntil(r *bufio.Reader, sentinel string, dst func() io.Writer) (int, error) {
	var held []byte // the last line read: the newline before the sentinel ends it
	var o io.Writer
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return -1, err
		}
		if o == nil {
			o = dst()
		}
		if rest, ok := bytes.CutPrefix(line, []byte(sentinel)); ok && held != nil {
			if len(held) > 1 {
				_, _ = o.Write(held[:len(held)-1])
			}
			code := 0
			if s := strings.TrimSpace(string(rest)); s != "" {
				if code, err = strconv.Atoi(s); err != nil {
					return -1, fmt.Errorf("the agent's exit status %q: %w", s, err)
				}
			}
			return code, nil
		}
		if held != nil {
			_, _ = o.Write(held)
		}
		held = line
	}
}

// followMarker is a follow session's first stdout line: it runs, and the
// agent will not send the attempt's output.
const followMarker = "__gantry_follow"

// follower is a follow session streaming an attempt's output.
type follower struct {
	done    chan struct{}
	cancel  context.CancelFunc
	mu      sync.Mutex
	started bool   // its session opened: it is waited for
	ran     bool   // its script ran (its marker came)
	ending  bool   // end was called
	drop    func() // drops its session's connection (a host that answers nothing)
}

// startFollow starts a follow session for the attempt run in a slot of
// its own, waiting for one while the attempt runs; it runs as the
// attempt's files' owner (its agent's user).
func (r *sshRunner) startFollow(ctx context.Context, run *agentRun) *follower {
	c, out, errOut := run.c, run.out, run.errOut
	ctx, cancel := context.WithCancel(ctx)
	f := &follower{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(f.done)
		var sess *ssh.Session
		for sess == nil {
			if err := r.acquire(ctx, c); err != nil {
				return
			}
			f.mu.Lock()
			if ctx.Err() != nil {
				f.mu.Unlock()
				c.release()
				return
			}
			f.started = true
			f.mu.Unlock()
			s, client, err := r.session(ctx, c)
			if err == nil {
				f.mu.Lock()
				f.drop = func() { r.pool.drop(c, client) }
				f.mu.Unlock()
			}
			if errors.Is(err, errOverLimit) { // wait for a slot again, unless the attempt ended
				f.mu.Lock()
				f.started = false
				ending := f.ending
				f.mu.Unlock()
				if ending {
					return
				}
				continue
			}
			if err != nil {
				c.touch()
				c.release()
				return
			}
			sess = s
		}
		defer func() { c.touch(); c.release() }()
		defer sess.Close()
		stop := context.AfterFunc(ctx, func() { _ = sess.Close() })
		defer stop()
		sess.Stdout = &markedOut{marker: followMarker + "\n", dst: out, seen: func() { f.mu.Lock(); f.ran = true; f.mu.Unlock() }}
		sess.Stderr, sess.Stdin = errOut, eofReader{}
		if err := sess.Run(run.a.as.remote(followScript(run.m.Dir, run.m.PGID, run.req.token))); err != nil {
			r.pool.log.Debug("following an attempt's output ended", "host", r.address, "err", err)
		}
	}()
	return f
}

// end waits for the follow session to stream the rest of the output (it
// ends once the attempt ended; at most a few seconds), or stops it when
// its session has not opened yet, and says whether its script ran.
func (f *follower) end() (ran bool) {
	if f == nil {
		return false
	}
	f.mu.Lock()
	f.ending = true
	if !f.started {
		f.cancel()
	}
	f.mu.Unlock()
	select {
	case <-f.done:
	case <-time.After(5 * time.Second):
		f.cancel()
		<-f.done
	}
	f.cancel()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ran
}

// followStopWait is how long a follow session stopped may take to end
// (the attempt it follows killed: its tail sees it gone within a second).
// A host that answers nothing holds it until its connection ends, which
// stop then ends.
const followStopWait = 5 * time.Second

// stop ends the follow session at once (an attempt killed: the rest of its
// output is not waited for); on a host that does not answer its close, by
// dropping its connection.
func (f *follower) stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.ending = true
	f.mu.Unlock()
	f.cancel()
	select {
	case <-f.done:
		return
	case <-time.After(followStopWait):
	}
	f.mu.Lock()
	drop := f.drop
	f.mu.Unlock()
	if drop != nil {
		drop()
	}
	<-f.done
}

// markedOut passes a stream on to dst, less its first line when that is
// marker (seen is called then).
type markedOut struct {
	marker string
	dst    io.Writer
	seen   func()
	head   []byte
	passed bool
}

func (m *markedOut) Write(p []byte) (int, error) {
	if m.passed {
		return m.dst.Write(p)
	}
	n := len(p)
	m.head = append(m.head, p...)
	if len(m.head) < len(m.marker) && strings.HasPrefix(m.marker, string(m.head)) {
		return n, nil
	}
	m.passed = true
	rest := m.head
	if bytes.HasPrefix(rest, []byte(m.marker)) {
		m.seen()
		rest = rest[len(m.marker):]
	}
	m.head = nil
	if len(rest) > 0 {
		_, _ = m.dst.Write(rest)
	}
	return n, nil
}
