package sshexec

import (
	"context"
	"os"
	"strconv"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// The cost of one command over SSH, sequentially on one connection, as
// each host of the ssh-500 bench scenario runs them (docs/performance.md):
// a bare session running `true` (the raw x/crypto/ssh loop, the floor),
// the same through the SSH runner, and as a durable attempt holding a host
// lock, as every node's command runs.
func BenchmarkSSHRawTrue(b *testing.B) {
	f := sshtest.Start(b, 1, sshtest.Options{})
	pem, err := os.ReadFile(f.KeyFile)
	if err != nil {
		b.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		b.Fatal(err)
	}
	hk, err := knownhosts.New(f.KnownHosts)
	if err != nil {
		b.Fatal(err)
	}
	c, err := ssh.Dial("tcp", f.Hosts[0].Addr, &ssh.ClientConfig{User: f.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: hk})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		s, err := c.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		err = s.Run("true")
		s.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}

func benchSSHRunner(b *testing.B, durable bool) {
	f := sshtest.Start(b, 1, sshtest.Options{})
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	r := p.Runner(f.Hosts[0].Addr, "")
	dir := b.TempDir()
	for i := 0; i < b.N; i++ {
		cmd := hostexec.Attempt{Command: hostexec.Command{Script: "true"}}
		if durable {
			cmd.ID, cmd.Lock, cmd.Env = "a."+strconv.Itoa(i), "w.f.n", map[string]string{"GANTRY_ATTEMPTS": dir + "/attempts"}
		}
		if res, err := runAs(context.Background(), r, cmd); err != nil || res.ExitCode != 0 {
			b.Fatalf("exit %d: %v", res.ExitCode, err)
		}
	}
}

func BenchmarkSSHRunnerTrue(b *testing.B)    { benchSSHRunner(b, false) }
func BenchmarkSSHRunnerDurable(b *testing.B) { benchSSHRunner(b, true) }
