// Package linestest holds what the runners' tests share: a collector of
// a command's output lines that says when one has come, and a flock that
// counts its calls.
package linestest

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

// Lines collects output lines ("stream:line") and says when one has been
// seen.
type Lines struct {
	mu   sync.Mutex
	got  []string
	seen map[string]chan struct{}
}

// New collects lines, ready to wait for those named.
func New(wait ...string) *Lines {
	l := &Lines{seen: map[string]chan struct{}{}}
	for _, w := range wait {
		l.seen[w] = make(chan struct{})
	}
	return l
}

// On is a hostexec.Command's OnLine.
func (l *Lines) On(s hostexec.Stream, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, string(s)+":"+line)
	if ch, ok := l.seen[line]; ok {
		close(ch)
		delete(l.seen, line)
	}
}

// Got is every line seen so far, as "stream:line".
func (l *Lines) Got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// Wait returns once line (named to New) has been seen, failing t after
// 10 s.
func (l *Lines) Wait(t *testing.T, line string) {
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

// CountFlock puts a flock first on PATH that notes its arguments in the
// file it returns, then runs the real one.
func CountFlock(t *testing.T, dir string) (calls string) {
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
