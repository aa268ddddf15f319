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

// A host where the attempt's files cannot be made fails each attempt at
// once, saying why; the attempts are made as the node's retry policy says
// (a full disk may be cleared meanwhile), each failing the same way.
func TestAttemptFilesFailureSaysWhy(t *testing.T) {
	t.Parallel()
	h := newHarness()
	nf := &noFilesHost{host: h.host}
	h.x.Hosts = runners{r: fake{nf}}
	d := dispatch(dag.OpCreate, 1, node("a", "run-a", 2))
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if n := nf.tries.Load(); n != 2 {
		t.Errorf("%d attempts, want 2 (the retry policy's)", n)
	}
	s := strings.Join(h.stored(), "\n")
	for _, want := range []string{"a failed 1 retry: the attempt's files cannot be made on the host", "a failed 2: the attempt's files cannot be made on the host"} {
		if !strings.Contains(s, want) {
			t.Errorf("events:\n%s\nwant %q", s, want)
		}
	}
}
