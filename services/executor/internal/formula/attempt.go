package formula

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/secrets"
	"github.com/gantry-dev/gantry/pkg/tracing"
)

// attempt runs the node once, when the host has room: its check (create:
// exit 0 means skipped; check: the verdict) and its command. record is
// called right before a process starts. permanent says retrying cannot
// help. The attempt has ended when it returns; slots are the slots it
// held, which the caller gives back (while it records the outcome) or
// hands over to the formula's next node (their free is nil when it held
// none). busErr (ErrBus) says the bus failed before anything started, and
// ErrStopping that the executor stops and its runner started nothing: the
// attempt did not happen (or, re-attaching, did not end here) and must
// not count.
func (nr *nodeRun) attempt(attempt int, record func() error) (final dag.NodeState, ev *events.NodeEvent, permanent bool, slots hold, busErr error) {
	ev = &events.NodeEvent{}
	slots, err := nr.takeSlots(attempt)
	if err == nil && slots.waited {
		slots, err = nr.heldByPause(attempt, slots)
	}
	if err != nil {
		if nr.stop.Err() != nil {
			ev.Status, ev.Reason = dag.NodeCancelled, "cancelled before it started"
			return dag.NodeCancelled, ev, true, hold{}, nil
		}
		return dag.NodeFailed, ev, false, hold{}, err
	}
	nr.placed = nil
	sh := &shell{nr: nr, attempt: attempt, record: record, ev: ev}
	sh.progress = &progressSink{sh: sh}
	defer func() {
		// The attempt's last progress is out before its outcome.
		sh.progress.stop()
		now := time.Now().UTC()
		ev.EndedAt = &now
	}()
	final, ev, permanent = sh.steps()
	if sh.drained != nil {
		// The runner started nothing: the worker is stopping.
		return final, ev, permanent, slots, fmt.Errorf("%w: %w", ErrStopping, sh.drained)
	}
	return final, ev, permanent, slots, nil
}

// steps runs the attempt's scripts: a check node's command; or a create
// node's check (exit 0 means skipped), then its command.
func (sh *shell) steps() (dag.NodeState, *events.NodeEvent, bool) {
	ev := sh.ev
	switch sh.nr.d.Operation {
	case dag.OpCheck:
		return sh.check()
	case dag.OpCreate:
		if len(sh.nr.n.Files) > 0 {
			if fd := sh.placeFiles(); fd.done {
				return fd.state, ev, fd.permanent
			}
		}
		// A node whose files changed is not in place: its check is not asked.
		if strings.TrimSpace(sh.nr.n.Check) != "" && len(sh.changed) == 0 {
			res, err := sh.run("check", sh.nr.n.Check)
			if err != nil && isPermanent(err) {
				sh.fill(res, err)
				ev.Status = dag.NodeFailed
				return dag.NodeFailed, ev, true
			}
			if sh.skippedAtTurn(err) {
				return dag.NodeSkipped, ev, false
			}
			if err == nil && res.ExitCode == 0 {
				sh.fill(res, nil)
				ev.Status, ev.Reason = dag.NodeSkipped, "check passed"
				return dag.NodeSkipped, ev, false
			}
		}
	}
	return sh.command()
}

// shell runs one attempt's scripts on the host and fills its event.
type shell struct {
	nr       *nodeRun
	attempt  int
	record   func() error
	ev       *events.NodeEvent
	seq      atomic.Int64
	progress *progressSink
	drained  error // a script was not started: the runner drains (hostexec.ErrDraining)
	// doneBy is the workflow whose run of the node on the host its turn
	// found (see turn): the attempt did not start.
	doneBy string
	// changed are the paths of the node's files the attempt changed
	// ($GANTRY_CHANGED); mask, the lines of its secret files, hidden in
	// its output.
	changed []string
	mask    []string
	// cmd is the last script's command, whose outputs file keepOutputs
	// reads.
	cmd hostexec.Attempt
}

// run runs one of the attempt's scripts ("check" or "run") as a durable
// command: a delivery that finds the attempt interrupted runs it again
// under the same id and re-attaches to it on the host.
//
// The node's secrets are read here, for each attempt: a secret that
// cannot be read fails the attempt before anything starts on the host.
func (sh *shell) run(what, script string) (hostexec.Result, error) {
	n := sh.nr.n
	env, secret, err := secrets.Split(sh.nr.x.secrets(), n.Env)
	if err != nil {
		return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: %w", errSecret, err)
	}
	script, env, secret, err = sh.fillOutputs(script, env, secret)
	if err != nil {
		return hostexec.Result{ExitCode: -1}, err
	}
	if len(n.Files) > 0 {
		if env == nil {
			env = map[string]string{}
		}
		env[changedEnv] = sh.changedList()
	}
	if why := dag.ScriptTooLarge(dag.ScriptWithEnvSize(script, env)); why != "" {
		return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: the %s script with its environment (its outputs in) is %s", errScriptTooLarge, what, why)
	}
	cmd := hostexec.Attempt{Command: hostexec.Command{Script: script, Env: env, Secrets: secret, Timeout: n.Timeout.D(), OnLine: sh.line,
		BeforeStart: sh.record, Become: n.Become, BecomeUser: n.BecomeUser, Mask: sh.mask},
		ID: sh.nr.attemptID(sh.attempt, what), Lock: sh.nr.lockName(), Mark: sh.nr.lockMark()}
	cmd.Output = what == "run" && sh.nr.d.Operation == dag.OpCreate && len(n.Outputs) > 0
	sh.cmd = cmd
	if sh.nr.d.Operation == dag.OpCreate && sh.nr.d.SkipAtTurnAfter != nil {
		cmd.Turn = sh.turn
	}
	res, err := sh.nr.runner.RunAttempt(sh.nr.stop, cmd)
	if errors.Is(err, hostexec.ErrDraining) && sh.drained == nil {
		sh.drained = err
	}
	return res, err
}

// turn decides, once the attempt holds the node's host lock and before
// anything of it starts on the host, whether it starts (hostexec asks
// when the attempt that held the lock last left this node's mark, the
// same operation and spec hash, and exit status 0, and when the attempt
// had to wait for the lock). It does not when that attempt is another
// workflow's create of this node that succeeded there with the same spec
// since this workflow was planned: the node is in place, and is skipped
// as already succeeded, naming that workflow. The host only names the
// attempt; what decides is what that attempt's executor recorded in
// gantry_nodes, which only executors write: its record says succeeded
// (or skipped: in place) with the same spec hash, at a revision after the
// one this workflow's plan read (Dispatch.SkipAtTurnAfter: a success
// recorded by then was known when the workflow was planned, and not
// skipped on purpose); or it still says that very attempt runs, with the
// same spec hash, while the host has its exit status 0 (its executor has
// not recorded the end yet: it ended just now, and the lock is free for
// that). Anything else starts the attempt: another spec, a failure, a
// delete or another operation since (a delete after a create is never
// skipped, and a create after a delete neither: the mark differs), this
// workflow's own attempt, a record that cannot be read.
func (sh *shell) turn(h hostexec.Holder) bool {
	if by, ok := sh.nr.doneAtTurn(h); ok {
		sh.doneBy = by
		return false
	}
	return true
}

// doneAtTurn says whether the lock's last holder h put this node in place
// since the workflow was planned (see turn), and in which workflow.
func (nr *nodeRun) doneAtTurn(h hostexec.Holder) (string, bool) {
	after := nr.d.SkipAtTurnAfter
	if after == nil || nr.d.Operation != dag.OpCreate || h.ExitCode != 0 || nr.stop.Err() != nil {
		return "", false // (cancelled: hostexec starts nothing anyway)
	}
	a, ok := parseAttemptID(h.Attempt)
	if !ok || a.workflow == nr.d.WorkflowID || a.op != dag.OpCreate || a.formula != nr.d.Formula || a.node != nr.n.Name {
		return "", false
	}
	ctx, cancel := context.WithTimeout(nr.stop, 10*time.Second)
	defer cancel()
	rec, rev, err := nr.x.Records.Get(ctx, events.NodeKey(a.workflow, dag.OpCreate, a.formula, a.node))
	if err != nil {
		nr.log.Warn("the node's last run on the host cannot be read; it runs", "after_workflow", a.workflow, "err", err)
		return "", false
	}
	if rec.SpecHash != nr.n.SpecHash {
		return "", false
	}
	switch {
	case rec.Status.Done() && rev > *after:
	case rec.Status == dag.NodeRunning && rec.Generation == a.generation && rec.Attempt == a.attempt:
	default:
		return "", false
	}
	nr.log.Info("node already succeeded on the host with the same spec; skipped at its turn", "by_workflow", a.workflow, "attempt", h.Attempt)
	return a.workflow, true
}

// skippedAtTurn fills the event of an attempt whose turn found the node in
// place (err: hostexec.ErrDeclined after turn said so), and says so.
func (sh *shell) skippedAtTurn(err error) bool {
	if !errors.Is(err, hostexec.ErrDeclined) || sh.doneBy == "" {
		return false
	}
	sh.ev.Status, sh.ev.Reason = dag.NodeSkipped, "already succeeded with the same spec in workflow "+sh.doneBy
	return true
}

// attemptRef is what an attempt id names (attemptIDAt).
type attemptRef struct {
	workflow            string
	generation, attempt int
	op                  dag.Operation
	formula, node, what string
}

// parseAttemptID reads an attempt id made by attemptIDAt.
func parseAttemptID(id string) (attemptRef, bool) {
	p := strings.Split(id, ".")
	if len(p) != 7 {
		return attemptRef{}, false
	}
	gen, err1 := strconv.Atoi(p[1])
	att, err2 := strconv.Atoi(p[5])
	if err1 != nil || err2 != nil || p[0] == "" || p[3] == "" || p[4] == "" {
		return attemptRef{}, false
	}
	return attemptRef{workflow: p[0], generation: gen, op: dag.Operation(p[2]), formula: p[3], node: p[4], attempt: att, what: p[6]}, true
}

// errSecret: a node's secrets could not all be read, so nothing ran.
// Retrying at once would not help; the node fails and says which secret.
var errSecret = errors.New("nothing ran: its secrets could not be read")

// lockName is the host lock of the node: one attempt of a composition's
// node runs at a time on its host, whichever workflow or executor started
// it.
func (nr *nodeRun) lockName() string {
	return strings.Join([]string{nr.d.Workflow, nr.d.Formula, nr.n.Name}, ".")
}

// lockMark is what an attempt of the node leaves in its host lock's holder
// file: its operation and spec hash ("create.sha256-..."), so that the
// next attempt of the node on the host is asked at its turn only after a
// run of the same operation and spec (see turn). None when the hash has
// characters a mark cannot (it would never match).
func (nr *nodeRun) lockMark() string {
	m := string(nr.d.Operation) + "." + strings.ReplaceAll(nr.n.SpecHash, ":", "-")
	for _, r := range m {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') || len(m) > 200 {
			return ""
		}
	}
	return m
}

// attemptID names an attempt's command on its host.
func (nr *nodeRun) attemptID(attempt int, what string) string {
	return nr.attemptIDAt(nr.d.Generation, attempt, what)
}

// attemptIDAt names an attempt's command of generation gen.
func (nr *nodeRun) attemptIDAt(gen, attempt int, what string) string {
	d := nr.d
	return strings.Join([]string{d.WorkflowID, strconv.Itoa(gen), string(d.Operation), d.Formula, nr.n.Name, strconv.Itoa(attempt), what}, ".")
}

// waitingPrefix starts the line a durable command prints on stderr when
// it waits for its host lock, followed by the holder's attempt id.
const waitingPrefix = "gantry: waiting for "

// line publishes an output line as it is printed. A wait for the host lock
// is also announced as a node event, naming the workflow waited for; a
// "PROGRESS: n" line of stdout, as a progress event too.
func (sh *shell) line(s hostexec.Stream, line string) {
	if holder, ok := strings.CutPrefix(line, waitingPrefix); ok && s == hostexec.Stderr {
		sh.waiting(holder)
	}
	if s == hostexec.Stdout && sh.progress != nil {
		sh.progress.line(line)
	}
	d := sh.nr.d
	ll := &events.LogLine{Ref: d.Ref, Attempt: sh.attempt, Stream: events.Stream(s), Seq: sh.seq.Add(1), Line: line}
	ll.Node = sh.nr.n.Name
	sh.nr.x.Bus.Fire(events.HostLogs(d.Ref.Host, ll.Node), ll)
}

// fill puts a result (exit code, output tails, error) on the event.
func (sh *shell) fill(res hostexec.Result, err error) {
	ev := sh.ev
	if res.ExitCode >= 0 || err == nil {
		code := res.ExitCode
		ev.ExitCode = &code
	}
	ev.StdoutTail, ev.StderrTail = events.BoundTail(res.Stdout, events.MaxTailBytes), events.BoundTail(res.Stderr, events.MaxTailBytes)
	switch {
	case err != nil:
		ev.Error, ev.Unreachable = events.BoundError(err.Error()), isUnreachable(err)
	case res.ExitCode != 0:
		ev.Error = fmt.Sprintf("exit status %d", res.ExitCode)
	}
}

// check runs the command of an operation: check node, whose exit status is
// the verdict: 0 nothing would change.
//
// A node's files are compared first: one that differs makes the verdict
// would_change; a node with files and no check command is judged by its
// files alone.
func (sh *shell) check() (dag.NodeState, *events.NodeEvent, bool) {
	ev := sh.ev
	files := len(sh.nr.n.Files) > 0
	differ := false
	if files {
		var fd filesDone
		if differ, fd = sh.compareFiles(); fd.done {
			return fd.state, ev, fd.permanent
		}
	}
	verdict := func(changes bool) events.CheckResult {
		if changes || differ {
			return events.CheckWouldChange
		}
		return events.CheckOK
	}
	if strings.TrimSpace(sh.nr.n.Command) == "" {
		ev.Status, ev.Check = dag.NodeSucceeded, verdict(!files)
		if !files {
			ev.Reason = "no check command: cannot tell"
		}
		return dag.NodeSucceeded, ev, false
	}
	res, err := sh.run("run", sh.nr.n.Command)
	sh.fill(res, err)
	if err != nil {
		ev.Status = dag.NodeFailed
		return dag.NodeFailed, ev, isPermanent(err)
	}
	ev.Status, ev.Error, ev.Check = dag.NodeSucceeded, "", verdict(res.ExitCode != 0)
	return dag.NodeSucceeded, ev, false
}

// command runs the node's command.
func (sh *shell) command() (dag.NodeState, *events.NodeEvent, bool) {
	ev := sh.ev
	res, err := sh.run("run", sh.nr.n.Command)
	if sh.skippedAtTurn(err) {
		return dag.NodeSkipped, ev, false
	}
	sh.fill(res, err)
	switch {
	case err == nil && res.ExitCode == 0 && sh.cmd.Output:
		if oerr := sh.keepOutputs(); oerr != nil {
			// Retrying would run the command again for what it did: the
			// node fails, and a retry of the workflow runs it again.
			ev.Status, ev.Error = dag.NodeFailed, events.BoundError(oerr.Error())
			return dag.NodeFailed, ev, true
		}
		ev.Status = dag.NodeSucceeded
		return dag.NodeSucceeded, ev, false
	case err == nil && res.ExitCode == 0:
		ev.Status = dag.NodeSucceeded
		return dag.NodeSucceeded, ev, false
	case errors.Is(err, hostexec.ErrCancelled):
		// said once: who or what cancelled it, and what became of it
		ev.Status, ev.Reason = dag.NodeCancelled, sh.nr.cancelWhy()+": "+killedReason(err)
		if !errors.Is(err, hostexec.ErrKill) {
			ev.Error = "" // the reason says it all; a kill not confirmed says why
		}
		return dag.NodeCancelled, ev, true
	}
	ev.Status = dag.NodeFailed
	return dag.NodeFailed, ev, isPermanent(err)
}

// killedReason says what became of a cancelled command on its host:
// killed, unless the kill was not confirmed.
func killedReason(err error) string {
	if errors.Is(err, hostexec.ErrKill) {
		return "its kill on the host was not confirmed, it may still run there"
	}
	return "killed on the host"
}

// isUnreachable says the host could not be reached or trusted: no
// connection, or none in time, or it stopped answering; its host key or
// our credentials refused.
func isUnreachable(err error) bool {
	for _, p := range []error{errUnreachable, hostexec.ErrConnect, hostexec.ErrStoppedAnswering, hostexec.ErrHostKeyUnknown, hostexec.ErrHostKeyChanged,
		hostexec.ErrHostKeyRevoked, hostexec.ErrAuth, hostexec.ErrIdentity} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// isPermanent says retrying cannot help: the host cannot be reached or
// trusted, refuses the credentials (or its identity file cannot be
// used), or its sudo does not run commands as asked (become).
// errScriptTooLarge: a script, once its outputs are in, is longer than a
// host's shell takes; nothing ran.
var errScriptTooLarge = errors.New("nothing ran")

func isPermanent(err error) bool {
	for _, p := range []error{errUnreachable, errRefused, errSecret, errFiles, errOutputMissing, errScriptTooLarge, hostexec.ErrHostKeyUnknown, hostexec.ErrHostKeyChanged, hostexec.ErrHostKeyRevoked,
		hostexec.ErrAuth, hostexec.ErrIdentity, hostexec.ErrBecome} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// waiting announces that the attempt waits for another workflow's run of
// the same node on this host (holder: that attempt's id, then " on this
// host").
func (sh *shell) waiting(holder string) {
	wf, _, _ := strings.Cut(strings.TrimSpace(strings.TrimSuffix(holder, " on this host")), ".")
	if wf == "" {
		wf = "another workflow" // its holder had not named itself yet
	} else {
		wf = "workflow " + wf
	}
	ev := &events.NodeEvent{Status: dag.NodeRunning, Reason: "waiting for " + wf + " (the same node runs there) on this host"}
	nr := sh.nr
	n := nr.d.Nodes[nr.j]
	ev.Ref, ev.Node, ev.Attempt, ev.SpecHash, ev.MaxAttempts, ev.Actor = nr.d.Ref, n.Name, sh.attempt, n.SpecHash, n.Retry.MaxAttempts, nr.x.Actor
	ctx := tracing.Context(context.Background(), nr.span, nr.nodeSpan(nr.j))
	nr.out.Emit(ctx, events.HostLifecycle(nr.d.Ref.Host), ev, msgID(nr.d.Ref, n.Name, "running-waiting", sh.attempt))
}
