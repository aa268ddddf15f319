package sshexec

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// logins counts the connections a host's sshd let in.
func logins(h *sshtest.Host) int { return strings.Count(h.Log(), "Accepted publickey for") }

// forwardedTo reports whether the jump host's sshd forwarded a channel to
// addr (its DEBUG1 log of each direct-tcpip request).
func forwardedTo(jump *sshtest.Host, addr string) bool {
	host, port, _ := net.SplitHostPort(addr)
	return strings.Contains(jump.Log(), fmt.Sprintf("target %s port %s", host, port))
}

// A host behind a jump host runs its commands through it: the target
// listens on 127.0.0.2, and the jump host's sshd forwarded a channel
// there. A durable command runs through it as well.
func TestJumpHostRunsThrough(t *testing.T) {
	f := sshtest.Start(t, 2, sshtest.Options{Listen: map[int]string{1: "127.0.0.2"}, LogLevel: "DEBUG1"})
	jump, target := f.Hosts[0], f.Hosts[1]
	p := newPool(t, f, f.KnownHosts)
	r := p.Runner(target.Addr, "", Jump{Address: jump.Addr})
	res, err := r.Run(context.Background(), hostexec.Command{Script: "echo through; touch " + target.Dir + "/ran"})
	if err != nil || res.Stdout != "through\n" {
		t.Fatalf("through the jump host: %+v %v", res, err)
	}
	if !forwardedTo(jump, target.Addr) {
		t.Fatalf("the jump host's sshd did not forward to %s; its log:\n%s", target.Addr, jump.Log())
	}
	if logins(jump) != 1 || logins(target) != 1 {
		t.Errorf("logins: jump %d, target %d; want 1 each", logins(jump), logins(target))
	}
	dir := t.TempDir()
	var lines []string
	var mu sync.Mutex
	on := func(_ hostexec.Stream, l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() }
	res, err = r.RunAttempt(context.Background(), durable(dir, "w1.1.f.n.1", on))
	if err != nil || res.ExitCode != 7 || !strings.Contains(res.Stdout, "line2") {
		t.Fatalf("durable command through the jump host: %+v %v", res, err)
	}
	if got := counted(t, dir); got != "start end" {
		t.Fatalf("durable command ran %q, want once", got)
	}
	// the same attempt again reads the recorded result, runs nothing
	if res, err = r.RunAttempt(context.Background(), durable(dir, "w1.1.f.n.1", nil)); err != nil || res.ExitCode != 7 || counted(t, dir) != "start end" {
		t.Fatalf("attempt again: %+v %v, runs %q", res, err, counted(t, dir))
	}
}

// Every hop's host key is checked as a direct host's is: a jump host whose
// key is not in known_hosts, or differs from the one recorded, is refused
// with the error of a direct host, naming the jump host, and nothing runs
// on the target.
func TestJumpHostKeyChecked(t *testing.T) {
	f := sshtest.Start(t, 2, sshtest.Options{})
	jump, target := f.Hosts[0], f.Hosts[1]
	var targetLine, jumpLine string
	for _, l := range strings.Split(string(mustRead(t, f.KnownHosts)), "\n") {
		if strings.HasPrefix(l, knownhosts.Normalize(target.Addr)+" ") {
			targetLine = l
		}
		if strings.HasPrefix(l, knownhosts.Normalize(jump.Addr)+" ") {
			jumpLine = l
		}
	}
	if targetLine == "" || jumpLine == "" {
		t.Fatalf("no known_hosts lines for %s and %s", target.Addr, jump.Addr)
	}
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherPub, err := ssh.NewPublicKey(other.Public())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		known string
		want  error
		says  []string
	}{
		{"unknown", targetLine + "\n", hostexec.ErrHostKeyUnknown, []string{"jump host " + f.User + "@" + jump.Addr, "ssh-keyscan -p"}},
		{"target unknown behind it", jumpLine + "\n", hostexec.ErrHostKeyUnknown,
			[]string{target.Addr + " offers", "ssh ssh://" + f.User + "@" + jump.Addr + " ssh-keyscan -p"}},
		{"changed", targetLine + "\n" + knownhosts.Line([]string{knownhosts.Normalize(jump.Addr)}, otherPub) + "\n", hostexec.ErrHostKeyChanged,
			[]string{"jump host " + f.User + "@" + jump.Addr, "differs from the key recorded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			known := filepath.Join(t.TempDir(), "known_hosts")
			if err := os.WriteFile(known, []byte(tc.known), 0o600); err != nil {
				t.Fatal(err)
			}
			r := newPool(t, f, known).HostRunner(Jump{Address: target.Addr}, Jump{Address: jump.Addr})
			_, err = r.Run(context.Background(), hostexec.Command{Script: "touch " + target.Dir + "/ran"})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			t.Logf("refused: %v", err)
			for _, s := range append(tc.says, jump.Addr+" ") {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if _, serr := os.Stat(target.Dir + "/ran"); serr == nil {
				t.Fatal("the command ran behind a jump host whose key was refused")
			}
		})
	}
}

// Two hosts behind one jump host share its one connection; when the jump
// host goes away and comes back, the next command redials it.
func TestJumpConnectionShared(t *testing.T) {
	f := sshtest.Start(t, 3, sshtest.Options{LogLevel: "VERBOSE"})
	jump, a, b := f.Hosts[0], f.Hosts[1], f.Hosts[2]
	p := newPool(t, f, f.KnownHosts)
	via := Jump{Address: jump.Addr}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 4; i++ {
		for _, h := range []*sshtest.Host{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := p.Runner(h.Addr, "", via).Run(context.Background(), hostexec.Command{Script: "echo " + h.Name})
				if err == nil && res.Stdout != h.Name+"\n" {
					err = fmt.Errorf("%s said %q", h.Name, res.Stdout)
				}
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := logins(jump); n != 1 {
		t.Fatalf("the jump host let in %d connections for two hosts behind it, want 1 shared", n)
	}
	if logins(a) != 1 || logins(b) != 1 {
		t.Fatalf("targets let in %d and %d connections, want 1 each", logins(a), logins(b))
	}
	// the jump host goes down with every connection through it, and back up
	jump.Stop()
	jump.Start()
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for _, h := range []*sshtest.Host{a, b} {
		for {
			_, err = p.Runner(h.Addr, "", via).Run(context.Background(), hostexec.Command{Script: "true"})
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s after the jump host came back: %v", h.Name, err)
		}
	}
	if n := logins(jump); n != 2 {
		t.Fatalf("the jump host let in %d connections in all, want 2 (one redial, shared)", n)
	}
}

// A jump host that does not forward says so, with what it needs.
func TestJumpHostWithoutForwarding(t *testing.T) {
	f := sshtest.Start(t, 2, sshtest.Options{HostConfig: map[int][]string{0: {"AllowTcpForwarding no"}}})
	p := newPool(t, f, f.KnownHosts)
	_, err := p.Runner(f.Hosts[1].Addr, "", Jump{Address: f.Hosts[0].Addr}).Run(context.Background(), hostexec.Command{Script: "true"})
	if !errors.Is(err, hostexec.ErrConnect) || !strings.Contains(err.Error(), "AllowTcpForwarding") || !strings.Contains(err.Error(), f.Hosts[0].Addr) {
		t.Fatalf("err = %v, want ErrConnect naming the jump host and AllowTcpForwarding", err)
	}
}

// A host behind a jump host that is down fails to connect, as a direct
// one does (so the node is retried), without blaming the jump host's
// configuration and without dropping its connection, which other hosts
// may be using.
func TestJumpTargetDown(t *testing.T) {
	f := sshtest.Start(t, 3, sshtest.Options{LogLevel: "VERBOSE"})
	jump, up, down := f.Hosts[0], f.Hosts[1], f.Hosts[2]
	p := newPool(t, f, f.KnownHosts)
	via := Jump{Address: jump.Addr}
	if _, err := p.Runner(up.Addr, "", via).Run(context.Background(), hostexec.Command{Script: "true"}); err != nil {
		t.Fatal(err)
	}
	down.Stop()
	_, err := p.Runner(down.Addr, "", via).Run(context.Background(), hostexec.Command{Script: "true"})
	if !errors.Is(err, hostexec.ErrConnect) || !strings.Contains(err.Error(), "could not connect to it") || strings.Contains(err.Error(), "AllowTcpForwarding") {
		t.Fatalf("err = %v, want ErrConnect saying the jump host could not connect", err)
	}
	if _, err := p.Runner(up.Addr, "", via).Run(context.Background(), hostexec.Command{Script: "true"}); err != nil {
		t.Fatal(err)
	}
	if n := logins(jump); n != 1 {
		t.Fatalf("the jump host let in %d connections, want 1: a host down behind it dropped it", n)
	}
}

// Jump hosts chain: the first hop forwards to the second, which forwards
// to the target; a target key unknown there is to be scanned through both.
func TestJumpHostsChained(t *testing.T) {
	f := sshtest.Start(t, 3, sshtest.Options{Listen: map[int]string{2: "127.0.0.2"}, LogLevel: "DEBUG1"})
	j1, j2, target := f.Hosts[0], f.Hosts[1], f.Hosts[2]
	p := newPool(t, f, f.KnownHosts)
	res, err := p.Runner(target.Addr, "", Jump{Address: j1.Addr}, Jump{Address: j2.Addr}).Run(context.Background(), hostexec.Command{Script: "echo two hops"})
	if err != nil || res.Stdout != "two hops\n" {
		t.Fatalf("through two jump hosts: %+v %v", res, err)
	}
	if !forwardedTo(j1, j2.Addr) || forwardedTo(j1, target.Addr) || !forwardedTo(j2, target.Addr) {
		t.Fatalf("want %s forwarding to %s only, and %s to %s; logs:\n%s\n%s", j1.Name, j2.Addr, j2.Name, target.Addr, j1.Log(), j2.Log())
	}
	known := filepath.Join(t.TempDir(), "known_hosts")
	lines := strings.Split(string(mustRead(t, f.KnownHosts)), "\n")
	if err := os.WriteFile(known, []byte(lines[0]+"\n"+lines[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = newPool(t, f, known).Runner(target.Addr, "", Jump{Address: j1.Addr}, Jump{Address: j2.Addr}).Run(context.Background(), hostexec.Command{Script: "true"})
	want := fmt.Sprintf("ssh -J %s@%s ssh://%s@%s ssh-keyscan -p", f.User, j1.Addr, f.User, j2.Addr)
	if !errors.Is(err, hostexec.ErrHostKeyUnknown) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want ErrHostKeyUnknown advising %q", err, want)
	}
}

// A jump host can hold the fleet's key to forwarding only, to the hosts
// behind it (docs/security.md): the host behind it runs, the jump host
// itself runs nothing, and another address is not forwarded to.
func TestJumpHostRestrictedKey(t *testing.T) {
	dir := t.TempDir()
	restricted := filepath.Join(dir, "authorized_keys")
	f := sshtest.Start(t, 3, sshtest.Options{HostConfig: map[int][]string{0: {"AuthorizedKeysFile " + restricted}}})
	jump, target, other := f.Hosts[0], f.Hosts[1], f.Hosts[2]
	line := fmt.Sprintf(`restrict,port-forwarding,permitopen="%s",command="/bin/false" `, target.Addr) + string(mustRead(t, f.KeyFile+".pub"))
	if err := os.WriteFile(restricted, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, f, f.KnownHosts)
	if res, err := p.Runner(target.Addr, "", Jump{Address: jump.Addr}).Run(context.Background(), hostexec.Command{Script: "echo behind"}); err != nil || res.Stdout != "behind\n" {
		t.Fatalf("through a restricted jump key: %+v %v", res, err)
	}
	if res, err := p.Runner(jump.Addr, "").Run(context.Background(), hostexec.Command{Script: "touch " + jump.Dir + "/ran"}); err == nil && res.ExitCode == 0 {
		t.Fatalf("the restricted key ran a command on the jump host: %+v", res)
	}
	if _, err := os.Stat(jump.Dir + "/ran"); err == nil {
		t.Fatal("the restricted key ran a command on the jump host")
	}
	if _, err := p.Runner(other.Addr, "", Jump{Address: jump.Addr}).Run(context.Background(), hostexec.Command{Script: "true"}); !errors.Is(err, hostexec.ErrConnect) || !strings.Contains(err.Error(), "refused to forward") {
		t.Fatalf("forwarded outside permitopen: %v", err)
	}
}
