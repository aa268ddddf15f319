package formula

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// noFilesHost is a host where no attempt's files can be made (its
// attempts directory cannot be written): hostexec fails each attempt so,
// before anything starts.
type noFilesHost struct {
	*host
	tries atomic.Int32
}

func (s *noFilesHost) run(ctx context.Context, cmd hostexec.Attempt, settle bool) (hostexec.Result, error) {
	s.tries.Add(1)
	return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: %s on h1: mkdir: cannot create directory '/srv/x': Permission denied", hostexec.ErrAttemptFiles, cmd.ID)
}

// A host where the attempt's files cannot be made fails the node at once,
// saying why: retrying cannot help, so its other attempts are not made.
func TestAttemptFilesFailureIsPermanent(t *testing.T) {
	t.Parallel()
	h := newHarness()
	nf := &noFilesHost{host: h.host}
	h.x.Hosts = runners{r: fake{nf}}
	d := dispatch(dag.OpCreate, 1, node("a", "run-a", 3))
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if n := nf.tries.Load(); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
	if s := strings.Join(h.stored(), "\n"); !strings.Contains(s, "a failed 1: the attempt's files cannot be made on the host") || strings.Contains(s, "a failed 1 retry") {
		t.Errorf("events:\n%s\nwant a failed once, not retried, saying why", s)
	}
}
