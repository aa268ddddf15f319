package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

// How an exec is followed.
const (
	// execTick is how often hosts whose command has ended are looked at,
	// to print those whose output is all in.
	execTick = 100 * time.Millisecond
	// execLogGrace is how long a host's output lines may come after its
	// node has ended: its lines travel on the log stream, its end on the
	// event stream. Past it, the host is printed with what has come (and
	// its event's output tails, when no line has).
	execLogGrace = 2 * time.Second
	// execCancelWait is how long an interrupted exec waits for its
	// cancelled workflow to end.
	execCancelWait = 30 * time.Second
)

// runExec submits the exec's composition as gantry submit does and
// follows the workflow to its end.
func runExec(cmd *cobra.Command, cf connFlags, ex *execRun, format string) error {
	cl, err := cf.connectOperator()
	if err != nil {
		return err
	}
	defer cl.Close()
	since := time.Now().Add(-time.Second)
	reply, err := sendComposition(cmd.Context(), cmd.ErrOrStderr(), cl, sent{file: "exec", what: "exec " + ex.name, data: ex.data})
	if err != nil {
		return err
	}
	linef(cmd.ErrOrStderr(), "gantry: workflow %s (%s) on %d host(s); gantry logs %s, gantry cancel %s", reply.WorkflowID, ex.name, len(ex.hosts), reply.WorkflowID, reply.WorkflowID)
	f := newExecFollow(ex, reply.WorkflowID, cmd.OutOrStdout(), cmd.ErrOrStderr(), format)
	return f.follow(cmd.Context(), cl, since, cmd.ErrOrStderr())
}

// follow reads the workflow's events and output lines until it ends,
// printing each host as its command ends. Ctrl-C (SIGINT), SIGTERM or
// SIGHUP cancels the workflow and waits (at most execCancelWait; a second
// signal ends gantry) for it to end.
func (f *execFollow) follow(ctx context.Context, cl *client.Client, since time.Time, stderr io.Writer) error {
	sig, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stopSignals()
	feedCtx, stopFeed := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFeed()
	feed, err := openEventFeed(feedCtx, cl, f.id, since, stderr)
	if err != nil {
		return err
	}
	if err := f.book.start(feedCtx, cl, since); err != nil {
		return err
	}
	evs, errs := pumpEvents(feedCtx, feed)
	tick := time.NewTicker(execTick)
	defer tick.Stop()
	interrupt := sig.Done()
	var giveUp <-chan time.Time
	for !f.ended || !f.flush(time.Now()) {
		select {
		case env := <-evs:
			f.take(env, time.Now())
		case err := <-errs:
			return err
		case <-tick.C:
			f.flush(time.Now())
		case <-interrupt:
			interrupt, giveUp = nil, time.After(execCancelWait)
			stopSignals() // a second Ctrl-C ends gantry at once
			f.interrupted = true
			cancelExec(cl, f.id, stderr)
		case <-giveUp:
			f.notRun(time.Now(), "the workflow had not ended when gantry stopped waiting for it")
			return f.finish(fmt.Errorf("workflow %s was cancelled and has not ended after %s: gantry status %s", f.id, execCancelWait, f.id))
		}
	}
	return f.finish(nil)
}

// pumpEvents hands the feed's events over a channel, and its error (it
// stops) on another.
func pumpEvents(ctx context.Context, feed *eventFeed) (<-chan *events.Envelope, <-chan error) {
	evs, errs := make(chan *events.Envelope), make(chan error, 1)
	go func() {
		for {
			_, env, err := feed.nextEvent()
			if err != nil {
				errs <- err
				return
			}
			select {
			case evs <- env:
			case <-ctx.Done():
				return
			}
		}
	}()
	return evs, errs
}

// cancelExec asks the planner to cancel the workflow.
func cancelExec(cl *client.Client, id string, stderr io.Writer) {
	_, err := cl.Control(context.Background(), id, events.VerbCancel, nil)
	var se *client.ServiceError
	switch {
	case errors.As(err, &se):
		linef(stderr, "gantry: cancel %s: %s", id, se.Description)
	case err != nil:
		linef(stderr, "gantry: cancel %s: %v", id, busErr(err))
	default:
		linef(stderr, "gantry: interrupted: cancelling workflow %s (its running commands are killed on the hosts); Ctrl-C again to stop waiting", id)
	}
}

// finish prints what is left and the summary (or the JSON document), and
// says how gantry exits: 130 when interrupted (giveUp, when the workflow
// did not end), else 0 when every host succeeded, 1 when not.
func (f *execFollow) finish(giveUp error) error {
	f.flushAll()
	if err := f.report(); err != nil {
		return err
	}
	switch {
	case giveUp != nil:
		return &exitError{code: ExitInterrupted, err: giveUp}
	case f.interrupted:
		return &exitError{code: ExitInterrupted, err: fmt.Errorf("workflow %s %s (interrupted)", f.id, f.state)}
	case f.state != dag.WorkflowSucceeded || f.counts().ok != len(f.ex.hosts):
		return failed("")
	}
	return nil
}
