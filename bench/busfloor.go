package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The bus floor is the least a chain link can cost on this machine with a
// JetStream bus between the one who decides and the one who runs: a loop
// of busFloorLinks links, each a dispatch stored in a stream, read by a
// pull consumer, `true` started through the Local runner (as the process
// start floor does), an outcome stored and read by a second pull consumer,
// whose handler stores the next dispatch. It has none of gantry's work:
// no lifecycle events, no projection, no run state, no limits, no JSON
// beyond a few bytes, one process for both sides.
//
// A guarantee of gantry's needs each of three messages stored in turn: the
// dispatch (an accepted run is not lost), a record before the process
// starts (a crash after the start does not run the step a second time)
// and the outcome (no success is reported that did not happen). The rest
// of what gantry stores per link (its lifecycle events, the run state, the
// node record after the outcome, the state-store's projection: 13
// messages per chain link in all) need not be waited for one by one.
const busFloorLinks = 1000

// floorShape is what the loop stores per link.
type floorShape struct {
	record bool // a record before the process starts
	// more messages stored per link: published before the outcome without
	// waiting, all of them stored before the dispatch is acked.
	more int
	// durable runs `true` as each node's command runs: a durable attempt
	// holding a host lock, its files beside the executor's (as the durable
	// start does), not a bare process.
	durable bool
}

// stored is how many messages the shape stores per link.
func (f floorShape) stored() int {
	n := 2 + f.more
	if f.record {
		n++
	}
	return n
}

// busFloorShapes are the shapes bench measures: the least loop, the least
// with gantry's guarantees, that with as many messages as gantry stores
// per link, and that with the command run as gantry runs it.
var busFloorShapes = []floorShape{{}, {record: true}, {record: true, more: 10}, {record: true, more: 10, durable: true}}

// busFloor starts its own nats-server (binDir's, file storage in a
// temporary directory, a random password) and returns the ms per link of
// the loop of shape f (wall time over links, as chain-1000's).
func busFloor(binDir string, f floorShape) (float64, error) {
	url, auth, stop, err := floorServer(binDir)
	if err != nil {
		return 0, err
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	attempts := ""
	if f.durable {
		adir, err := besideAttempts("bench-floor-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(adir)
		attempts = filepath.Join(adir, "attempts")
	}
	return floorLoop(ctx, url, auth, floorRun{f, attempts, busFloorLinks})
}

// floorServer starts binDir's nats-server for a floor: JetStream with
// file storage in a temporary directory, a random password. stop ends it
// and removes the directory.
func floorServer(binDir string) (url string, auth nats.Option, stop func(), err error) {
	dir, err := os.MkdirTemp("", "gantry-bench-busfloor-")
	if err != nil {
		return "", nil, nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	pass, err := randomHex(16)
	if err != nil {
		return "", nil, nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		return "", nil, nil, err
	}
	defer logf.Close()
	port := freePort()
	natsd, err := startProc("nats-server", logf, nil, filepath.Join(binDir, "nats-server"),
		"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "js"), "--user", "bench", "--pass", pass)
	if err != nil {
		return "", nil, nil, err
	}
	if err = waitPort(port); err != nil {
		natsd.stop()
		return "", nil, nil, err
	}
	stop = func() { natsd.stop(); os.RemoveAll(dir) }
	return fmt.Sprintf("nats://127.0.0.1:%d", port), nats.UserInfo("bench", pass), stop, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// floorSide is one side of the loop: its own connection, as the planner
// and the executor each have theirs.
type floorSide struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func connectSide(url string, auth nats.Option) (*floorSide, error) {
	nc, err := nats.Connect(url, auth)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &floorSide{nc: nc, js: js}, nil
}

// consumer makes a stream of subject prefix name (file storage) and a
// durable pull consumer of it that acks each message explicitly.
func (s *floorSide) consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage}); err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return s.js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
}

// floorRun is a shape to run, with the attempts directory of its durable
// attempts, and how many links.
type floorRun struct {
	floorShape
	attempts string
	links    int
}

// floorBus is a floor's bus: its two sides, the consumers of dispatches
// (the runner's) and of outcomes (the decider's), and the streams of the
// records and the more messages.
type floorBus struct {
	decider, runner      *floorSide
	dispatches, outcomes jetstream.Consumer
}

// openFloorBus connects both sides and makes the streams and consumers.
func openFloorBus(ctx context.Context, url string, auth nats.Option) (*floorBus, error) {
	b := &floorBus{}
	var err error
	if b.decider, err = connectSide(url, auth); err != nil {
		return nil, err
	}
	if b.runner, err = connectSide(url, auth); err != nil {
		b.decider.nc.Close()
		return nil, err
	}
	if err = b.streams(ctx); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *floorBus) streams(ctx context.Context) error {
	var err error
	if b.dispatches, err = b.runner.consumer(ctx, "DISPATCH"); err != nil {
		return err
	}
	if b.outcomes, err = b.decider.consumer(ctx, "OUTCOME"); err != nil {
		return err
	}
	for _, name := range []string{"RECORD", "MORE"} {
		if _, err := b.runner.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage}); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	return nil
}

func (b *floorBus) close() {
	b.decider.nc.Close()
	b.runner.nc.Close()
}

// firstError keeps the first error reported (the one that ends a loop).
type firstError chan error

func newFirstError() firstError { return make(firstError, 1) }

func (f firstError) report(err error) {
	select {
	case f <- err:
	default:
	}
}

// floorLoop runs f.links links and returns the ms per link.
func floorLoop(ctx context.Context, url string, auth nats.Option, f floorRun) (float64, error) {
	bus, err := openFloorBus(ctx, url, auth)
	if err != nil {
		return 0, err
	}
	defer bus.close()
	decider, runner, dispatches, outcomes := bus.decider, bus.runner, bus.dispatches, bus.outcomes
	fail := newFirstError()
	report := fail.report
	// ran is closed once the last link's messages are all stored and its
	// dispatch acked: the loop ends there.
	ran, last, once := make(chan struct{}), strconv.Itoa(f.links-1), sync.Once{}
	run, err := dispatches.Consume(func(m jetstream.Msg) {
		if err := runLink(ctx, runner.js, m, f); err != nil {
			report(err)
		} else if string(m.Data()) == last {
			once.Do(func() { close(ran) })
		}
	})
	if err != nil {
		return 0, err
	}
	defer run.Stop()
	var ended atomic.Int64
	done := make(chan struct{})
	decide, err := outcomes.Consume(func(m jetstream.Msg) {
		n := ended.Add(1)
		if err := m.Ack(); err != nil {
			report(err)
			return
		}
		if n == int64(f.links) {
			close(done)
			return
		}
		if n > int64(f.links) {
			return
		}
		if _, err := decider.js.Publish(ctx, "DISPATCH.node", []byte(strconv.FormatInt(n, 10))); err != nil {
			report(err)
		}
	})
	if err != nil {
		return 0, err
	}
	defer decide.Stop()
	start := time.Now()
	if _, err := decider.js.Publish(ctx, "DISPATCH.node", []byte("0")); err != nil {
		return 0, err
	}
	select {
	case <-done:
	case err := <-fail:
		return 0, fmt.Errorf("bus floor: %w", err)
	case <-ctx.Done():
		return 0, fmt.Errorf("bus floor: stopped after %d of %d links: %w", ended.Load(), f.links, ctx.Err())
	}
	select {
	case <-ran:
		return float64(time.Since(start).Microseconds()) / 1000 / float64(f.links), nil
	case err := <-fail:
		return 0, fmt.Errorf("bus floor: %w", err)
	case <-ctx.Done():
		return 0, fmt.Errorf("bus floor: stopped after %d of %d links: %w", ended.Load(), f.links, ctx.Err())
	}
}

// floorLocal runs the bus floor's commands, as the executor's Local runner
// does.
var floorLocal = localexec.Local{Worker: localexec.WorkerEnvOf(os.LookupEnv)}

// runLink is the runner's side of a link: the record (when asked for),
// the process, the more messages, the outcome, then the dispatch's ack
// once all are stored.
func runLink(ctx context.Context, js jetstream.JetStream, m jetstream.Msg, f floorRun) error {
	if f.record {
		if _, err := js.Publish(ctx, "RECORD.node", m.Data()); err != nil {
			return err
		}
	}
	var (
		res hostexec.Result
		err error
	)
	if f.durable {
		res, err = floorLocal.RunAttempt(ctx, hostexec.Attempt{ID: "floor." + string(m.Data()), Lock: "floor.f.n",
			Command: hostexec.Command{Script: "true", Env: map[string]string{"GANTRY_ATTEMPTS": f.attempts}}})
	} else {
		res, err = floorLocal.Run(ctx, hostexec.Command{Script: "true"})
	}
	if err == nil && res.ExitCode != 0 {
		err = errors.New("true exited " + strconv.Itoa(res.ExitCode))
	}
	if err != nil {
		return err
	}
	for range f.more {
		if _, err := js.PublishAsync("MORE.node", m.Data()); err != nil {
			return err
		}
	}
	if _, err := js.Publish(ctx, "OUTCOME.node", m.Data()); err != nil {
		return err
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	return m.Ack()
}

// key names the shape in bench's output and results.json.
func (f floorShape) key() string {
	k := fmt.Sprintf("%d stored, %d waited for", f.stored(), f.stored()-f.more)
	if f.durable {
		k += ", durable"
	}
	return k
}
