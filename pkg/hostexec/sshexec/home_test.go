package sshexec

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// An attempt run again re-attaches, also when its environment sets HOME
// (the attempts directory then is $HOME/.gantry/attempts, as the session
// supervisor finds it): it never runs twice.
func TestDurableWithHomeInEnvRunsOnce(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	runners := map[string]hostexec.AttemptRunner{"ssh": newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, ""), "local": localexec.Local{}}
	for name, r := range runners {
		home := t.TempDir()
		id := fmt.Sprintf("home.%s.%d", name, time.Now().UnixNano())
		if real, err := os.UserHomeDir(); err == nil { // where it went astray
			t.Cleanup(func() {
				for _, x := range []string{".run", ".out", ".err", ".f"} {
					_ = os.Remove(filepath.Join(real, ".gantry/attempts", id+x))
				}
			})
		}
		for i := 0; i < 2; i++ {
			res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: id, Command: hostexec.Command{Script: `echo ran >>"$HOME/count"; echo ok`, Env: map[string]string{"HOME": home}}})
			if err != nil || res.ExitCode != 0 || res.Stdout != "ok\n" {
				t.Fatalf("%s run %d: %+v %v", name, i, res, err)
			}
		}
		b, _ := os.ReadFile(filepath.Join(home, "count"))
		if n := strings.Count(string(b), "ran"); n != 1 {
			t.Errorf("%s: the attempt ran %d times", name, n)
		}
		if _, err := os.Stat(filepath.Join(home, ".gantry/attempts", id+".run")); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
