package localexec

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// Test helpers, as sshexec's tests have them.

// lines collects output lines and says when one has been seen.
type lines struct {
	mu   sync.Mutex
	got  []string
	seen map[string]chan struct{}
}

func newLines(wait ...string) *lines {
	l := &lines{seen: map[string]chan struct{}{}}
	for _, w := range wait {
		l.seen[w] = make(chan struct{})
	}
	return l
}

func (l *lines) on(s hostexec.Stream, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, string(s)+":"+line)
	if ch, ok := l.seen[line]; ok {
		close(ch)
		delete(l.seen, line)
	}
}

func (l *lines) wait(t *testing.T, line string) {
	t.Helper()
	l.mu.Lock()
	ch, ok := l.seen[line]
	l.mu.Unlock()
	if !ok {
		return
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("line %q never came", line)
	}
}

// countFlock puts a flock first on PATH that notes its arguments in the
// file it returns, then runs the real one.
func countFlock(t *testing.T, dir string) (calls string) {
	t.Helper()
	bin, calls := filepath.Join(dir, "bin"), filepath.Join(dir, "flock-calls")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	real, err := exec.LookPath("flock")
	if err != nil {
		t.Fatal(err)
	}
	fake := "#!/bin/sh\necho \"$*\" >>" + hostsh.Quote(calls) + "\nexec " + hostsh.Quote(real) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "flock"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	return calls
}
