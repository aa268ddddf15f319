package sshexec

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

func (p *Pool) open(address, user string) bool {
	c := p.entry(address, user, "", nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.client != nil
}

// A connection that runs nothing for --ssh-idle is closed, never one with
// a session open however long it runs, and the next command dials again.
func TestIdleConnectionsClosed(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User, Idle: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	addr := f.Hosts[0].Addr
	run := func(script string) {
		t.Helper()
		if res, err := p.Runner(addr, "").Run(context.Background(), hostexec.Command{Script: script}); err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v", script, res, err)
		}
	}
	// A command three times the idle time long keeps its connection.
	done := make(chan struct{})
	go func() { defer close(done); run("sleep 1") }()
	time.Sleep(800 * time.Millisecond)
	if !p.open(addr, f.User) {
		t.Fatal("the connection of a running command was closed")
	}
	<-done
	if !p.open(addr, f.User) {
		t.Fatal("closed right after its command ended")
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.open(addr, f.User) {
		if time.Now().After(deadline) {
			t.Fatal("an idle connection stayed open 5 s with --ssh-idle 300ms")
		}
		time.Sleep(50 * time.Millisecond)
	}
	run("true") // dialed again
	if !p.open(addr, f.User) {
		t.Fatal("not dialed again")
	}
}

// Without an idle time (negative), a connection stays open.
func TestIdleNeverWhenNegative(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User, Idle: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if _, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "true"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if !p.open(f.Hosts[0].Addr, f.User) {
		t.Fatal("closed although idle closing is off")
	}
}

// A jump host's connection is not closed while a connection through it is
// open, however idle the jump host's own sessions are; once that one is
// closed, the jump host's goes at the next pass.
func TestIdleJumpHostKeptWhileCarrying(t *testing.T) {
	f := sshtest.Start(t, 2, sshtest.Options{})
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User, Idle: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx := context.Background()
	bastion, target := f.Hosts[0].Addr, f.Hosts[1].Addr
	if _, err := p.client(ctx, p.entry(bastion, f.User, "", nil)); err != nil {
		t.Fatal(err)
	}
	// The target's connection, as if dialed through the bastion (a direct
	// one moved under the bastion's path: what is checked is the pool's
	// bookkeeping, the forwarding itself is TestJump*'s).
	direct := p.entry(target, f.User, "", nil)
	cl, err := p.client(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	behind := p.entry(target, f.User, "", []Jump{{Address: bastion, User: f.User}})
	direct.mu.Lock()
	direct.client = nil
	direct.mu.Unlock()
	behind.mu.Lock()
	behind.client = cl
	behind.mu.Unlock()
	later := time.Now().Add(time.Hour) // everything is idle
	p.closeIdle(later)
	if p.open(bastion, f.User) == false {
		t.Fatal("the jump host's connection was closed while a connection through it was open")
	}
	behind.mu.Lock()
	gone := behind.client == nil
	behind.mu.Unlock()
	if !gone {
		t.Fatal("the idle connection behind the jump host stayed open")
	}
	p.closeIdle(later)
	if p.open(bastion, f.User) {
		t.Fatal("the jump host's connection stayed open with nothing through it")
	}
}
