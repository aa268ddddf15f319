package formula

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// sudoHost is a host whose sudo wants a password: a command that becomes
// fails as hostexec fails it, before anything starts; the others run on
// the scripted host.
type sudoHost struct {
	*host
	mu  sync.Mutex
	got []string // the become of each command, "user" or "-"
}

func (s *sudoHost) run(ctx context.Context, cmd hostexec.Attempt, settle bool) (hostexec.Result, error) {
	s.mu.Lock()
	as := "-"
	if cmd.Become {
		as = "root"
		if cmd.BecomeUser != "" {
			as = cmd.BecomeUser
		}
	}
	s.got = append(s.got, as)
	s.mu.Unlock()
	if cmd.Become {
		return hostexec.Result{ExitCode: -1}, fmt.Errorf("%w: sudo on h1 needs a password for deploy", hostexec.ErrBecome)
	}
	return s.host.run(ctx, cmd, settle)
}

// A node's become reaches the host's runner with its command, and a host
// whose sudo will not run it fails the node at once: retrying cannot
// help, so its other attempts are not made.
func TestBecomeFailureIsPermanent(t *testing.T) {
	t.Parallel()
	h := newHarness()
	sh := &sudoHost{host: h.host}
	h.x.Hosts = runners{r: fake{sh}}
	plain := node("plain", "run-plain", 3)
	root := node("root", "run-root", 3, "plain")
	root.Become, root.BecomeUser = true, "app"
	d := dispatch(dag.OpCreate, 1, plain, root)
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	sh.mu.Lock()
	got := strings.Join(sh.got, ",")
	sh.mu.Unlock()
	if got != "-,app" {
		t.Errorf("commands ran as %s, want the plain node as the login user, then one try as app", got)
	}
	if s := strings.Join(h.stored(), "\n"); !strings.Contains(s, "root failed 1: become: sudo on h1 needs a password") || strings.Contains(s, "root failed 1 retry") {
		t.Errorf("events:\n%s\nwant root failed once, not retried, saying why", s)
	}
}
