package localexec

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// The cost of starting a process on this machine, the floor under every
// local node (docs/performance.md): a bare exec of sh -c true, and the same
// command through the Local runner (process group, output capture).
func BenchmarkExecShTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/sh", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLocalRunnerTrue(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		res, err := Local{}.Run(ctx, hostexec.Command{Script: "true"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exit %d: %v", res.ExitCode, err)
		}
	}
}

// The same from 8 goroutines at once: how many processes per second this
// machine can start at all, every core busy (the ceiling of any local
// fan-out, before any orchestration).
func BenchmarkLocalRunnerTrueParallel(b *testing.B) {
	ctx := context.Background()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := Local{}.Run(ctx, hostexec.Command{Script: "true"})
			if err != nil || res.ExitCode != 0 {
				b.Errorf("exit %d: %v", res.ExitCode, err)
				return
			}
		}
	})
}

// BenchmarkLocalRunnerDurable is BenchmarkLocalRunnerTrue's command run as
// a durable attempt holding a host lock, as every node's command is: the
// difference is what the supervisor costs per attempt.
func BenchmarkLocalRunnerDurable(b *testing.B) {
	for name, l := range localRunners() {
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			for i := 0; i < b.N; i++ {
				cmd := hostexec.Attempt{ID: "a." + strconv.Itoa(i), Lock: "w.f.n", Command: hostexec.Command{Script: "true", Env: map[string]string{"GANTRY_ATTEMPTS": dir + "/attempts"}}}
				if _, err := l.RunAttempt(context.Background(), cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// localRunners are the runners the benchmarks compare (one: Local).
func localRunners() map[string]Local {
	return map[string]Local{"local": {}}
}

// BenchmarkLocalRunnerDurableChained is BenchmarkLocalRunnerDurable with a
// pause of 3 ms (not timed) before each attempt, as the nodes of a chain
// of formulas come: the time between the nodes of a chain, when the
// worker's earlier attempt has finished its bookkeeping (following its
// output, giving its lock back) before the next starts.
func BenchmarkLocalRunnerDurableChained(b *testing.B) {
	for name, l := range localRunners() {
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				time.Sleep(3 * time.Millisecond)
				b.StartTimer()
				cmd := hostexec.Attempt{ID: "a." + strconv.Itoa(i), Lock: "w.f.n", Command: hostexec.Command{Script: "true", Env: map[string]string{"GANTRY_ATTEMPTS": dir + "/attempts"}}}
				if _, err := l.RunAttempt(context.Background(), cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
