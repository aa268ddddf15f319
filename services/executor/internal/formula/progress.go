package formula

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/executor/internal/progress"
)

// progressSink turns an attempt's "PROGRESS: n" stdout lines into progress
// events, in order with the node's transitions, throttled (progress.Throttle):
// a percent held back is published when its gap has passed, or when the
// attempt ends, before its outcome.
type progressSink struct {
	sh      *shell
	mu      sync.Mutex
	th      progress.Throttle
	timer   *time.Timer
	seq     int
	stopped bool
}

// line offers a stdout line.
func (ps *progressSink) line(line string) {
	p, ok := progress.Parse(line)
	if !ok {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.stopped {
		return
	}
	publish, wait := ps.th.Offer(p, time.Now())
	switch {
	case publish:
		ps.publish(p)
	case wait > 0 && ps.timer == nil:
		ps.timer = time.AfterFunc(wait, ps.due)
	}
}

// due publishes the held percent once its gap has passed.
func (ps *progressSink) due() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.timer = nil
	if ps.stopped {
		return
	}
	p, ok, wait := ps.th.Due(time.Now())
	switch {
	case ok:
		ps.publish(p)
	case wait > 0:
		ps.timer = time.AfterFunc(wait, ps.due)
	}
}

// stop publishes a held percent and stops: the attempt has ended.
func (ps *progressSink) stop() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.stopped {
		return
	}
	ps.stopped = true
	if ps.timer != nil {
		ps.timer.Stop()
		ps.timer = nil
	}
	if p, ok := ps.th.Flush(time.Now()); ok {
		ps.publish(p)
	}
}

// publish emits a progress event. Its message id has the attempt's count
// of them and the percent: a replay of the same output is stored once.
func (ps *progressSink) publish(p int) {
	ps.seq++
	nr := ps.sh.nr
	ev := &events.ProgressEvent{Ref: nr.d.Ref, Attempt: ps.sh.attempt, Percent: p}
	ev.Node = nr.n.Name
	nr.out.Emit(context.Background(), events.HostLifecycle(nr.d.Ref.Host), ev,
		msgID(nr.d.Ref, nr.n.Name, "progress-"+strconv.Itoa(ps.seq)+"-"+strconv.Itoa(p), ps.sh.attempt))
}
