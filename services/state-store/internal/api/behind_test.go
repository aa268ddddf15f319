package api

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// While the projection catches up, every read answers from behind the
// stream: that is said once per BehindLogEvery, not once per read.
func TestBehindIsSaidOncePerInterval(t *testing.T) {
	var logs bytes.Buffer
	s := &server{log: slog.New(slog.NewJSONHandler(&logs, nil))}
	for range 100 {
		s.behind(errors.New("the projection has applied the stream up to 3 of 9"))
	}
	if n := strings.Count(logs.String(), "answering from a projection behind the stream"); n != 1 {
		t.Fatalf("100 reads behind the stream logged %d lines, want 1:\n%s", n, logs.String())
	}
	if s.behindQuiet != 99 {
		t.Errorf("%d reads counted as not said, want 99", s.behindQuiet)
	}
}
