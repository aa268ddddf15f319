package gate

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A cancelled workflow's gates stop: the service follows the workflows'
// lifecycles (workflow.*.lifecycle) and calls WorkflowCancelled, which
// stops the checks of that workflow's gates (the running command is
// killed on its host, as at a timeout) and answers those delivered later
// at once; a stopped gate gives no verdict (the run is over).

// errWorkflowCancelled: the gate's workflow was cancelled.
var errWorkflowCancelled = errors.New("the workflow was cancelled")

// cancelledFor is how long a cancel is remembered for gates delivered
// after it.
const cancelledFor = time.Hour

// cancels are the gates being checked, by workflow, and the workflows
// cancelled lately.
type cancels struct {
	mu        sync.Mutex
	running   map[string]map[*running]struct{}
	cancelled map[string]cancelledRun
}

type running struct {
	gen  int
	stop context.CancelCauseFunc
}

type cancelledRun struct {
	gen int
	at  time.Time
}

// track registers a gate of generation gen of workflow id being checked
// under stop; it says whether the workflow was cancelled already, and
// returns what to call once the gate ends.
func (c *cancels) track(id string, gen int, stop context.CancelCauseFunc) (bool, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.cancelled[id]; ok && k.gen >= gen {
		return true, func() {}
	}
	if c.running == nil {
		c.running = map[string]map[*running]struct{}{}
	}
	if c.running[id] == nil {
		c.running[id] = map[*running]struct{}{}
	}
	r := &running{gen: gen, stop: stop}
	c.running[id][r] = struct{}{}
	return false, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.running[id], r)
		if len(c.running[id]) == 0 {
			delete(c.running, id)
		}
	}
}

// WorkflowCancelled stops the checks of the gates of workflow id's
// generations up to gen, and those delivered later.
func (c *Checker) WorkflowCancelled(id string, gen int, now time.Time) {
	c.cancels.mu.Lock()
	defer c.cancels.mu.Unlock()
	if c.cancels.cancelled == nil {
		c.cancels.cancelled = map[string]cancelledRun{}
	}
	for k, v := range c.cancels.cancelled {
		if now.Sub(v.at) > cancelledFor {
			delete(c.cancels.cancelled, k)
		}
	}
	c.cancels.cancelled[id] = cancelledRun{gen: gen, at: now}
	for r := range c.cancels.running[id] {
		if r.gen <= gen {
			r.stop(errWorkflowCancelled)
		}
	}
}
