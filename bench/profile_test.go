package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"
)

const tracesFixture = `File: executor
Build ID: 67f3
Type: cpu
Time: 2026-11-26 16:08:00 UTC
Duration: 2s, Total samples = 70ms ( 3.50%)
-----------+-------------------------------------------------------
      10ms   runtime.futex
             runtime.futexwakeup
             runtime.mcall
-----------+-------------------------------------------------------
         k:  v
      20ms   runtime.mallocgc
             encoding/json.(*decodeState).object
             github.com/nats-io/nats.go/jetstream.(*kv).Put
             main.main
-----------+-------------------------------------------------------
    1.50ms   syscall.Syscall
             github.com/nats-io/nats%2ego.(*natsWriter).flush
             github.com/nats-io/nats%2ego.(*Conn).flusher
-----------+-------------------------------------------------------
      20ms   syscall.Syscall6
             github.com/nats-io/nats-server/v2/server.(*msgBlock).writeMsgRecord
             github.com/nats-io/nats-server/v2/server.(*fileStore).StoreMsg
             github.com/nats-io/nats-server/v2/server.(*stream).processJetStreamMsg
             github.com/nats-io/nats-server/v2/server.(*client).processInboundClientMsg
-----------+-------------------------------------------------------
    18.50ms   runtime.memmove
             github.com/gantry-dev/gantry/services/planner/internal/run.(*Run).Step
             github.com/nats-io/nats.go/jetstream.(*pullConsumer).Consume.func1
`

func TestParseTracesAndSteps(t *testing.T) {
	samples, err := parseTraces([]byte(tracesFixture))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		secs  float64
		depth int
		step  string
	}{
		{0.010, 3, "Go runtime (scheduler, timers)"},
		{0.020, 4, "JSON"},
		{0.0015, 3, "NATS client (consume, I/O)"},
		{0.020, 5, "nats-server: stream store (file)"},
		{0.0185, 3, "gantry's own code"},
	}
	if len(samples) != len(want) {
		t.Fatalf("%d samples, want %d: %+v", len(samples), len(want), samples)
	}
	for i, w := range want {
		s := samples[i]
		if diff := s.seconds - w.secs; diff > 1e-9 || diff < -1e-9 || len(s.stack) != w.depth {
			t.Errorf("sample %d: %v s, %d frames; want %v s, %d frames", i, s.seconds, len(s.stack), w.secs, w.depth)
		}
		if got := stepOf(s.stack); got != w.step {
			t.Errorf("sample %d (%s): step %q, want %q", i, s.stack[0], got, w.step)
		}
	}
}

// Each step by the function a sample passes through, as the packages are
// laid out: the host attempt's work is in hostexec and its transports.
func TestStepOfPackages(t *testing.T) {
	for fn, want := range map[string]string{
		"github.com/gantry-dev/gantry/pkg/hostexec/localexec.Local.runAttempt":             "host attempt (hostexec: files, lock, output)",
		"github.com/gantry-dev/gantry/pkg/hostexec/sshexec.(*agent).run":                   "host attempt (hostexec: files, lock, output)",
		"github.com/gantry-dev/gantry/pkg/hostexec.Attempt.Check":                          "host attempt (hostexec: files, lock, output)",
		"github.com/gantry-dev/gantry/pkg/hostexecutor.Run":                                "gantry's own code",
		"github.com/gantry-dev/gantry/services/executor/internal/slots.(*Manager).Acquire": "concurrency slots (executor)",
		"github.com/gantry-dev/gantry/services/executor/internal/formula.(*nodeRun).run":   "gantry's own code",
	} {
		if got := stepOf([]string{"syscall.openat", fn, "runtime.goexit"}); got != want {
			t.Errorf("%s: step %q, want %q", fn, got, want)
		}
	}
}

func TestParseTracesRefusesAValueWithoutUnit(t *testing.T) {
	bad := "-----------+----\n      10   runtime.futex\n"
	if _, err := parseTraces([]byte(bad)); err == nil {
		t.Error("a value without a unit was read")
	}
}

// TestStepSecondsOfARealProfile profiles this process encoding and
// decoding JSON and reads the profile back as the bench reads a
// service's: most of its CPU is in the JSON step.
func TestStepSecondsOfARealProfile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "cpu.pb.gz")
	out, err := os.Create(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		t.Fatal(err)
	}
	// CPU time, not wall time: the machine may be busy with others.
	start, deadline := cpuTime(), time.Now().Add(30*time.Second)
	for cpuTime()-start < 400*time.Millisecond && time.Now().Before(deadline) {
		for range 200 {
			b, _ := json.Marshal(map[string]any{"workflow": "w", "nodes": []int{1, 2, 3}, "host": "h"})
			var m map[string]any
			_ = json.Unmarshal(b, &m)
		}
	}
	pprof.StopCPUProfile()
	out.Close()
	by, total, err := stepSeconds(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if total < 0.1 || by["JSON"] < total/2 {
		t.Errorf("JSON %.3f s of %.3f s in all (%v): want most of at least 0.1 s", by["JSON"], total, by)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
