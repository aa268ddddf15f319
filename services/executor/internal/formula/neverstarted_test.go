package formula

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// flaky runs its first command on h, then cannot connect.
type flaky struct {
	mu sync.Mutex
	n  int
	h  *host
}

func (f *flaky) run(ctx context.Context, cmd hostexec.Attempt, settle bool) (hostexec.Result, error) {
	if len(f.h.scripts()) > 0 && !settle {
		return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: connection refused", hostexec.ErrConnect)
	}
	return f.h.run(ctx, cmd, settle)
}

// Generation 1 could not reach the host (NeverStarted). A `gantry retry`
// (generation 2) runs the node's command on the host, which fails; its
// next attempt cannot connect. Something did start on the host in this
// run: the record must not say NeverStarted (alreadyDone would then read
// past this run to an older success and skip the node).
func TestNeverStartedIsNotCarriedIntoANewGeneration(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.x.Hosts = runners{err: errors.New("no key for user deploy")}
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", "fail", 1))); err != nil {
		t.Fatal(err)
	}
	if r := h.record(dag.OpCreate, "n"); !r.NeverStarted {
		t.Fatalf("gen 1 record %+v: want never started", r)
	}
	h.runs.Set("w1", events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning})
	h.host.exits["fail"] = []int{1}
	h.x.Hosts = runners{r: fake{&flaky{h: h.host}}}
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 2, node("n", "fail", 2))); err != nil {
		t.Fatal(err)
	}
	if ran := h.host.scripts(); len(ran) != 1 {
		t.Fatalf("ran %q, want the command once; events %q", ran, h.stored())
	}
	if r := h.record(dag.OpCreate, "n"); r.NeverStarted {
		t.Errorf("gen 2 record %+v: says never started, but its attempt 1 ran %q on the host", r, h.host.scripts())
	}
}
