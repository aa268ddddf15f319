package hostexec

import (
	"context"
	"os/exec"
	"testing"
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
		res, err := Local{}.Run(ctx, Command{Script: "true"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exit %d: %v", res.ExitCode, err)
		}
	}
}
