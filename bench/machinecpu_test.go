package main

import (
	"runtime"
	"testing"
	"time"
)

// A core kept busy shows in the machine's count (which counts every
// process, so the test's own spin is the least it can read), and the
// count never exceeds the cores there are.
func TestMachineCPUCountsABusyCore(t *testing.T) {
	m := readMachineCPU()
	if m.total <= 0 || m.busy <= 0 {
		t.Fatalf("/proc/stat read as %+v", m)
	}
	for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); {
	}
	got := m.coresBusy()
	if got < 0.5 || got > float64(runtime.NumCPU())+0.25 {
		t.Fatalf("cores busy while one spins: %.2f, want 0.5..%d", got, runtime.NumCPU())
	}
	if (machineCPU{}).coresBusy() != 0 {
		t.Fatal("an unread start counts as busy")
	}
}
