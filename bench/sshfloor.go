package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/ssh"
)

// ssh-500's floors with what the guarantees need: the raw loop's hosts,
// commands and parallelism (the commands of a host one after another, the
// hosts in parallel, as ssh-500's formula a host of 100 nodes in order),
// with a JetStream bus between the one who decides and the one who runs,
// and with each command run as a durable attempt as gantry runs it. They
// tell what ssh-500's ratio to its raw loop can be at the least on the
// machine of the moment, whatever the services do:
//
//   - bus: a dispatch a host, stored and read by a pull consumer; for each
//     of its commands a record stored before the command starts and the
//     outcome stored after it (each waited for), read by a second pull
//     consumer; the command a session of its own on the host's
//     connection, as the raw loop runs it;
//   - durable: no bus; each command a durable attempt through the
//     executor's own SSH runner (sshexec: its host agent, the attempt's
//     files and host lock on the host, in the attempts directory gantry
//     uses);
//   - durable+bus: both, what a node needs for gantry's guarantees;
//   - durable+bus+N: and N more messages stored a node without waiting,
//     as the contract's per-node messages beyond the two (its running and
//     succeeded events each their own message, its host's projection).
type sshFloorShape struct {
	bus, durable bool
	more         int // messages stored a command beside the record and outcome, not waited for
}

var sshFloorShapes = []sshFloorShape{{bus: true}, {durable: true}, {bus: true, durable: true}, {bus: true, durable: true, more: 2}}

// key names the shape in bench's output and results.json (a peer of
// ssh-500, beside the raw loop's "floor").
func (s sshFloorShape) key() string {
	var parts []string
	if s.durable {
		parts = append(parts, "durable")
	}
	if s.bus {
		parts = append(parts, "bus")
	}
	if s.more > 0 {
		parts = append(parts, strconv.Itoa(s.more))
	}
	return "floor " + strings.Join(parts, "+")
}

// sshFloor runs t in shape s and returns its wall time, from the first
// dial (or the first dispatch) to the last command's outcome. The bus's
// nats-server (binDir's) is started before the clock starts. A durable
// shape's attempts are kept where the executor keeps its own
// ($HOME/.gantry/attempts: creating files in a new directory costs this
// VM's file system several times more), under names of their own, removed
// after the run.
func sshFloor(binDir string, t rawTarget, s sshFloorShape) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	attempts := ""
	if s.durable {
		home, err := os.UserHomeDir()
		if err != nil {
			return 0, err
		}
		attempts = filepath.Join(home, ".gantry", "attempts")
	}
	run, closeRun, err := floorCommands(t, attempts)
	if err != nil {
		return 0, err
	}
	defer closeRun()
	if !s.bus {
		return chainsDirect(ctx, t, run)
	}
	url, auth, stop, err := floorServer(binDir)
	if err != nil {
		return 0, err
	}
	defer stop()
	return chainsOverBus(ctx, busChains{url: url, auth: auth, target: t, more: s.more}, run)
}

// runFloorCommand runs the n-th command of host h.
type runFloorCommand func(ctx context.Context, h, n int) error

// floorCommands runs t's command on its hosts: a session each on one
// connection a host (dialed on first use), or, given an attempts
// directory, a durable attempt each through sshexec's runner. Closing
// removes the attempts' files.
func floorCommands(t rawTarget, attempts string) (runFloorCommand, func(), error) {
	if attempts != "" {
		return durableCommands(t, attempts)
	}
	cfg, err := rawConfig(t)
	if err != nil {
		return nil, nil, err
	}
	conns := make([]*rawConn, len(t.addrs))
	for i, a := range t.addrs {
		conns[i] = &rawConn{cfg: cfg, addr: a}
	}
	closeAll := func() {
		for _, c := range conns {
			c.close()
		}
	}
	return func(_ context.Context, h, _ int) error { return conns[h].run(t.command) }, closeAll, nil
}

// durableCommands runs each command as a durable attempt through the
// executor's SSH runner, its files in attempts: floor-<random>.<host>.<n>,
// each its own host lock, as each of gantry's nodes has.
func durableCommands(t rawTarget, attempts string) (runFloorCommand, func(), error) {
	prefix, err := randomHex(6)
	if err != nil {
		return nil, nil, err
	}
	prefix = "floor-" + prefix
	pool, err := sshexec.NewPool(sshexec.SSHConfig{KeyFile: t.keyFile, KnownHosts: t.knownHosts, DefaultUser: t.user})
	if err != nil {
		return nil, nil, err
	}
	runners := make([]hostexec.AttemptRunner, len(t.addrs))
	for i, a := range t.addrs {
		runners[i] = pool.Runner(a, t.user)
	}
	env := map[string]string{"GANTRY_ATTEMPTS": attempts}
	run := func(ctx context.Context, h, n int) error {
		id := fmt.Sprintf("%s.%d.%d", prefix, h, n)
		res, err := runners[h].RunAttempt(ctx, hostexec.Attempt{ID: id, Lock: id, Command: hostexec.Command{Script: t.command, Env: env}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%s exited %d", t.command, res.ExitCode)
		}
		return err
	}
	closeAll := func() {
		pool.Close()
		for _, dir := range []string{attempts, filepath.Join(attempts, "..", "locks")} {
			files, _ := filepath.Glob(filepath.Join(dir, prefix+".*"))
			for _, f := range files {
				os.Remove(f)
			}
		}
	}
	return run, closeAll, nil
}

// rawConn is one host's connection of the raw loop, dialed on first use.
type rawConn struct {
	cfg  *ssh.ClientConfig
	addr string
	c    *ssh.Client
}

func (r *rawConn) run(command string) error {
	if r.c == nil {
		c, err := ssh.Dial("tcp", r.addr, r.cfg)
		if err != nil {
			return err
		}
		r.c = c
	}
	s, err := r.c.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Run(command)
}

func (r *rawConn) close() {
	if r.c != nil {
		r.c.Close()
	}
}

// chainsDirect runs each host's commands one after another, all the hosts
// at once (ssh-500's raw loop runs its 5 hosts at once too), with no bus.
func chainsDirect(ctx context.Context, t rawTarget, run runFloorCommand) (time.Duration, error) {
	start := time.Now()
	errs := make(chan error, len(t.addrs))
	var wg sync.WaitGroup
	for h := range t.addrs {
		wg.Go(func() {
			for n := range t.perHost {
				if err := run(ctx, h, n); err != nil {
					errs <- fmt.Errorf("%s: %w", t.addrs[h], err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(drain(errs)...); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func drain(errs <-chan error) []error {
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return all
}

// busChains is a run of chainsOverBus: its bus, its hosts and commands,
// and the messages stored a command without waiting.
type busChains struct {
	url    string
	auth   nats.Option
	target rawTarget
	more   int
}

// chainsOverBus runs each host's commands with the least bus a node of
// gantry's needs: the decider stores a dispatch a host; the runner, given
// it, runs the host's commands one after another, each with a record
// stored before it and its outcome after it (both waited for) and b.more
// messages stored without waiting, then acks the dispatch; the decider
// reads every outcome and ends with the last. The hosts run in parallel.
func chainsOverBus(ctx context.Context, b busChains, run runFloorCommand) (time.Duration, error) {
	bus, err := openFloorBus(ctx, b.url, b.auth)
	if err != nil {
		return 0, err
	}
	defer bus.close()
	decider, runner, dispatches, outcomes := bus.decider, bus.runner, bus.dispatches, bus.outcomes
	fail := newFirstError()
	report := fail.report
	t := b.target
	ran, err := dispatches.Consume(func(m jetstream.Msg) {
		go func() { // the hosts at once
			if err := hostChain(ctx, runner.js, m, t.perHost, b.more, run); err != nil {
				report(err)
			}
		}()
	})
	if err != nil {
		return 0, err
	}
	defer ran.Stop()
	left, done := len(t.addrs)*t.perHost, make(chan struct{})
	decide, err := outcomes.Consume(func(m jetstream.Msg) { // called one message at a time
		if err := m.Ack(); err != nil {
			report(err)
			return
		}
		if left--; left == 0 {
			close(done)
		}
	})
	if err != nil {
		return 0, err
	}
	defer decide.Stop()
	start := time.Now()
	for h := range t.addrs {
		if _, err := decider.js.Publish(ctx, "DISPATCH.host", []byte(strconv.Itoa(h))); err != nil {
			return 0, err
		}
	}
	select {
	case <-done:
		return time.Since(start), nil
	case err := <-fail:
		return 0, fmt.Errorf("ssh floor: %w", err)
	case <-ctx.Done():
		return 0, fmt.Errorf("ssh floor: %w", ctx.Err())
	}
}

// hostChain is the runner's side of a host's dispatch: for each command
// the record, the command, the more messages and the outcome; then the
// dispatch's ack once all are stored.
func hostChain(ctx context.Context, js jetstream.JetStream, m jetstream.Msg, commands, more int, run runFloorCommand) error {
	h, err := strconv.Atoi(string(m.Data()))
	if err != nil {
		return fmt.Errorf("dispatch %q: want a host's index", m.Data())
	}
	for n := range commands {
		id := []byte(strconv.Itoa(h) + "." + strconv.Itoa(n))
		if _, err := js.Publish(ctx, "RECORD.node", id); err != nil {
			return err
		}
		if err := run(ctx, h, n); err != nil {
			return err
		}
		for range more {
			if _, err := js.PublishAsync("MORE.node", id); err != nil {
				return err
			}
		}
		if _, err := js.Publish(ctx, "OUTCOME.node", id); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	return m.Ack()
}
