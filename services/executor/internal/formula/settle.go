package formula

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	"github.com/gantry-dev/gantry/pkg/secrets"
)

// Settling what nobody follows. A node's command outlives its executor
// (its attempt is durable on the host), so a node may be recorded running
// in gantry_nodes while no executor follows it: its executor died. The
// next delivery of its dispatch normally re-attaches to it. But when the
// workflow was cancelled meanwhile (or a retry superseded the dispatch's
// generation), that delivery must not run anything: it settles instead
// each node recorded running, on its host (hostexec's Settle: the attempt
// is killed if it still runs, never started if it has not, and how it
// ended is read from the host), records the node's end in gantry_nodes,
// and publishes it (after the attempt's running, published again: the
// executor that died may not have stored it), so the projection and
// gantry status stop showing it running, and a retry sees a success it
// found there. A later generation
// does the same with an attempt of an earlier one that it finds recorded
// running, before it runs the node again (or not at all: it succeeded).

// settleTimeout bounds settling one attempt on its host (a kill takes
// about 4 s at most there).
const settleTimeout = 30 * time.Second

// stopped handles a dispatch that must not run: its workflow was
// cancelled (or is being), or a later generation superseded it (later).
// Nothing starts. The nodes recorded running are settled on the host,
// and their ends published. In a cancelled run the rest keep what their
// records say, or are cancelled (or blocked) as they would have been had
// the cancel come while the formula ran, and the formula's outcome
// follows from the nodes' ends. A later generation's dispatch says what
// becomes of them: for an earlier one, only the ends found on the host
// are published, and the formula as cancelled (the planner ignores it).
// An error means something could not be read, settled or recorded: the
// dispatch is delivered again.
func (f *formulaRun) stopped(ctx context.Context, later bool) error {
	var err error
	if f.runner, err = f.x.Hosts.Runner(transport.TargetOf(f.d.Host)); err != nil {
		f.runner = unreachable{err}
	}
	states := make([]dag.NodeState, len(f.pf.Nodes))
	type settled struct {
		j  int
		st dag.NodeState
	}
	results := make(chan settled, len(states))
	settling := 0
	var failed []string
	for j, n := range f.d.Nodes {
		states[j] = dag.NodePending
		nr := &nodeRun{formulaRun: f, j: j, n: n, key: events.NodeKey(f.d.WorkflowID, f.d.Operation, f.d.Formula, n.Name), log: f.log.With("node", n.Name)}
		if err := nr.read(ctx); err != nil {
			f.fail(fmt.Errorf("node %s: %w", n.Name, err))
			continue
		}
		rec := nr.rec
		switch {
		case later && rec.Status != dag.NodeRunning:
		case rec.Status.Done():
			states[j] = rec.Status
			if rec.Generation == f.d.Generation {
				nr.runningAgain(ctx, rec) // as fromRecord does
			}
			nr.emit(ctx, &events.NodeEvent{Status: rec.Status, Run: events.Run{ExitCode: rec.ExitCode}, Reason: "already recorded " + string(rec.Status)}, rec.Attempt)
		case rec.Status == dag.NodeRunning && rec.Generation <= f.d.Generation && rec.Attempt > 0:
			settling++
			go func() {
				st, ev, err := nr.settle(ctx)
				if err != nil {
					f.fail(fmt.Errorf("node %s: %w", n.Name, err))
				} else if ev != nil {
					nr.runningAgain(ctx, nr.rec)
					nr.emit(ctx, ev, nr.rec.Attempt)
				}
				results <- settled{j, st}
			}()
		case rec.Generation == f.d.Generation && rec.Status == dag.NodeFailed:
			states[j] = dag.NodeFailed
			failed = append(failed, n.Name)
			nr.runningAgain(ctx, rec)
			nr.emit(ctx, &events.NodeEvent{Status: dag.NodeFailed, Run: events.Run{ExitCode: rec.ExitCode, Error: "failed earlier in this run"}}, rec.Attempt)
		case rec.Generation == f.d.Generation && rec.Status == dag.NodeCancelled:
			states[j] = dag.NodeCancelled
			nr.runningAgain(ctx, rec)
			nr.emit(ctx, &events.NodeEvent{Status: dag.NodeCancelled, Reason: "cancelled"}, rec.Attempt)
		}
	}
	for ; settling > 0; settling-- {
		r := <-results
		states[r.j] = r.st
		if r.st == dag.NodeFailed {
			failed = append(failed, f.pf.Nodes[r.j].Name)
		}
	}
	if f.err != nil {
		return errors.Join(f.err, f.out.Flush(ctx))
	}
	if later {
		f.log.Info("dispatch of a superseded generation: nothing started")
		return f.endStopped(ctx, dag.FormulaCancelled, "")
	}
	// What has not started never will.
	step := f.pf.NodeStep(states, true, f.d.OnFailure == dag.OnFailureContinue)
	for _, b := range step.Blocked {
		states[b.Node] = dag.NodeBlocked
		f.emitNode(ctx, b.Node, &events.NodeEvent{Status: dag.NodeBlocked, Blocker: f.pf.Nodes[b.Blocker].Name}, 0)
	}
	notStarted := "not started: the workflow was cancelled"
	if f.expired {
		notStarted = "not started: " + f.deadline()
	}
	for _, j := range step.Cancelled {
		states[j] = dag.NodeCancelled
		f.emitNode(ctx, j, &events.NodeEvent{Status: dag.NodeCancelled, Reason: notStarted}, 0)
	}
	st, why := dag.FormulaCancelled, ""
	switch {
	case f.expired && !allDone(states):
		st, why = dag.FormulaFailed, f.deadlineFailure(states, failed)
	case len(failed) > 0:
		st, why = dag.FormulaFailed, events.BoundError("node(s) failed: "+strings.Join(failed, ", "))
	case allDone(states):
		st = dag.FormulaSucceeded // everything had ended on its hosts before the cancel reached them
	}
	f.log.Info("dispatch of a cancelled run (or of a formula past its timeout): nothing started", "status", st)
	return f.endStopped(ctx, st, why)
}

// endStopped publishes the outcome of a formula that starts nothing once
// its nodes' events are stored, and stores it; when one of them could not
// be, it publishes nothing more and fails: the redelivery decides.
func (f *formulaRun) endStopped(ctx context.Context, st dag.FormulaState, why string) error {
	if err := f.out.Flush(ctx); f.unrecorded() || err != nil {
		return errors.Join(f.err, err)
	}
	f.emitFormula(ctx, st, why)
	return f.out.Flush(ctx)
}

// settle ends, on its host, the attempt the node's record says is running
// (see above), records how it ended, and returns the node's state and the
// event that announces it (nil when the record had moved on to an end
// announced already). The attempt is the record's, in the record's
// generation.
func (nr *nodeRun) settle(ctx context.Context) (dag.NodeState, *events.NodeEvent, error) {
	rec := nr.rec
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	ev := &events.NodeEvent{GenAttempt: rec.GenAttempts, Run: events.Run{StartedAt: rec.StartedAt}}
	res, err := nr.settleOn(ctx, rec, "run")
	what := "command"
	if errors.Is(err, hostexec.ErrNoAttempt) && nr.d.Operation == dag.OpCreate && strings.TrimSpace(nr.n.Check) != "" {
		// It may have been in its check: the command starts only after it.
		res, err = nr.settleOn(ctx, rec, "check")
		what = "check"
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%w: its check ended, its command never started", hostexec.ErrNoAttempt)
		}
	}
	st := dag.NodeFailed
	switch {
	case err == nil && what == "check": // its check passed: nothing to do
		st, ev.Reason = dag.NodeSkipped, "check passed (it ended on the host while no executor followed it)"
	case err == nil && nr.d.Operation == dag.OpCheck:
		st, ev.Check = dag.NodeSucceeded, events.CheckOK
		if res.ExitCode != 0 {
			ev.Check = events.CheckWouldChange
		}
	case err == nil && res.ExitCode == 0:
		st, ev.Reason = dag.NodeSucceeded, "it ended on the host while no executor followed it"
	case err == nil:
		ev.Error = fmt.Sprintf("exit status %d (it ended on the host while no executor followed it)", res.ExitCode)
	case errors.Is(err, hostexec.ErrCancelled):
		st, ev.Reason = dag.NodeCancelled, "cancelled: killed on the host"
	case errors.Is(err, hostexec.ErrNoAttempt):
		st, ev.Reason = dag.NodeCancelled, "cancelled: it had not started on the host"
	case errors.Is(err, hostexec.ErrLost):
		ev.Error = events.BoundError(err.Error())
	default: // the host did not answer, or the kill is not confirmed: the dispatch comes back
		return dag.NodeRunning, nil, fmt.Errorf("settle the attempt %d recorded running on %s: %w", rec.Attempt, nr.d.Ref.Host, err)
	}
	if res.ExitCode >= 0 {
		code := res.ExitCode
		ev.ExitCode = &code
	}
	ev.StdoutTail, ev.StderrTail = events.BoundTail(res.Stdout, events.MaxTailBytes), events.BoundTail(res.Stderr, events.MaxTailBytes)
	st = nr.settledOutputs(ctx, rec, st, what, ev)
	ev.Status = st
	now := time.Now().UTC()
	ev.EndedAt = &now
	nr.log.Info("attempt settled on the host", "attempt", rec.Attempt, "generation", rec.Generation, "status", st, "exit_code", res.ExitCode)
	rec.Status, rec.ExitCode = st, ev.ExitCode
	err = nr.saveOutcome(ctx, rec)
	if errors.Is(err, events.ErrChanged) {
		// Another executor recorded its end meanwhile: that record stands.
		if err := nr.read(ctx); err != nil {
			return dag.NodeRunning, nil, err
		}
		if nr.rec.Status != dag.NodeRunning {
			return nr.rec.Status, nil, nil
		}
	}
	if err != nil {
		return dag.NodeRunning, nil, err
	}
	return st, ev, nil
}

// settleOn settles the script what ("run" or "check") of the attempt rec
// records, with the node's environment (where its attempts are kept).
// The output read back is masked as the attempt's run masked it; when
// what it must hide cannot all be read now, none of it is kept.
func (nr *nodeRun) settleOn(ctx context.Context, rec Record, what string) (hostexec.Result, error) {
	cmd, hidden := nr.settleCommand(ctx, what)
	res, err := nr.runner.Settle(ctx, hostexec.Attempt{ID: nr.attemptIDAt(rec.Generation, rec.Attempt, what), Command: cmd})
	if !hidden {
		nr.log.Warn("the settled attempt's output is not shown: what it must hide could not all be read", "attempt", rec.Attempt)
		res.Stdout, res.Stderr = "", ""
	}
	return res, err
}

// settleCommand is the command a settle of the script what runs: the
// node's environment and become, and what its output must hide, as its
// run hid it: the node's secrets, the lines of its secret files and the
// secret outputs it read (the secret outputs it wrote are masked once
// they are read back: settledOutputs). hidden is false when some of these
// cannot be read (a secret gone since): a settle does not need them to
// find the attempt's files.
func (nr *nodeRun) settleCommand(ctx context.Context, what string) (cmd hostexec.Command, hidden bool) {
	env, secret, err := secrets.Split(nr.x.secrets(), nr.n.Env)
	hidden = err == nil
	if err != nil {
		env = plainEnv(nr.n.Env) // where the attempt's files are (GANTRY_ATTEMPTS, HOME) is never a secret
	}
	mask, err := nr.secretFileLines()
	hidden = hidden && err == nil
	script := nr.n.Command
	if what == "check" {
		script = nr.n.Check
	}
	if _, _, filled, err := nr.fillOutputs(ctx, script, maps.Clone(env), maps.Clone(secret)); err == nil {
		for _, v := range filled {
			mask = append(mask, v) // the secret outputs read (and the node's secrets again)
		}
	} else {
		hidden = false
	}
	return hostexec.Command{Env: env, Secrets: secret, Mask: mask, Become: nr.n.Become, BecomeUser: nr.n.BecomeUser}, hidden
}

// settledOutputs keeps the outputs of a settled attempt that succeeded, as
// a followed run's are (dependents read them; their secret values are
// masked in ev's tails), and returns the node's state: failed when they
// cannot be kept, as a run's node does. A node whose secret outputs are
// not read back (its attempt did not succeed) shows no output: what it
// wrote is not known, so not hidden.
func (nr *nodeRun) settledOutputs(ctx context.Context, rec Record, st dag.NodeState, what string, ev *events.NodeEvent) dag.NodeState {
	if len(nr.n.Outputs) == 0 || nr.d.Operation != dag.OpCreate {
		return st
	}
	if st == dag.NodeSucceeded && what == "command" {
		a := hostexec.Attempt{ID: nr.attemptIDAt(rec.Generation, rec.Attempt, "run"),
			Command: hostexec.Command{Env: plainEnv(nr.n.Env), Become: nr.n.Become, BecomeUser: nr.n.BecomeUser}}
		err := nr.keepOutputs(ctx, a, rec.Attempt, ev)
		if err == nil {
			return st
		}
		st, ev.Reason, ev.Error = dag.NodeFailed, "", events.BoundError(err.Error()+" (it ended on the host while no executor followed it)")
	}
	if slices.ContainsFunc(nr.n.Outputs, func(o dag.Output) bool { return o.Secret }) {
		ev.StdoutTail, ev.StderrTail = "", ""
	}
	return st
}

// plainEnv is the variables of env that are not secrets.
func plainEnv(env map[string]dag.EnvValue) map[string]string {
	plain := map[string]string{}
	for k, v := range env {
		if !v.IsSecret() {
			plain[k] = v.Text
		}
	}
	return plain
}
