package formula

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// The executor stops between two attempts (a restart, a deploy): the
// dispatch is redelivered, and the next attempt must still name in
// $GANTRY_CHANGED the file the failed attempt placed (it is in place now,
// so only the record can say it changed).
func TestChangedSurvivesARestartBetweenAttempts(t *testing.T) {
	t.Parallel()
	h := newFilesHarness(t)
	a, out, fails := filepath.Join(h.dir, "a.conf"), filepath.Join(h.dir, "changed"), filepath.Join(h.dir, "fails")
	n := h.fileNode(`printf '%s|' "$GANTRY_CHANGED" >>`+out+`; [ -s `+fails+` ] && { : >`+fails+`; exit 1; }; true`, inline(a, "A\n"))
	n.Retry = dag.RetryPolicy{MaxAttempts: 2, InitialInterval: dag.Duration(3 * time.Second), MaxInterval: dag.Duration(3 * time.Second), Multiplier: 1}
	if err := os.WriteFile(fails, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stopping, stop := context.WithCancel(context.Background())
	h.x.Stopping = stopping
	go func() {
		for {
			if b, _ := os.ReadFile(out); len(b) > 0 {
				time.Sleep(300 * time.Millisecond)
				stop()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	d := dispatch(dag.OpCreate, 1, n)
	if err := h.x.Run(context.Background(), d); !errors.Is(err, ErrStopping) {
		t.Fatalf("first delivery: %v, want ErrStopping between attempts", err)
	}
	h.x.Stopping = nil // a new executor takes the redelivery
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, n)); err != nil {
		t.Fatal(err)
	}
	if r := h.record(dag.OpCreate, "n"); r.Status != dag.NodeSucceeded {
		t.Fatalf("record %+v", r)
	}
	if got, _ := os.ReadFile(out); string(got) != a+"|"+a+"|" {
		t.Errorf("$GANTRY_CHANGED was %q, want %q in both attempts", got, a+"|"+a+"|")
	}
}
