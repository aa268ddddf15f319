package sshexec

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/linestest"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// A host that accepts TCP and never speaks SSH fails within the connect
// timeout, naming the host and the phase.
func TestSilentHostFailsWithinTheConnectTimeout(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User, ConnectTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	addr := sshtest.Silent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = p.Runner(addr, "").Run(ctx, hostexec.Command{Script: "true"})
	if ctx.Err() != nil {
		t.Fatalf("still connecting after 20s (connect timeout 500ms): %v", err)
	}
	want := "no SSH banner from " + addr + " within 500ms"
	if !errors.Is(err, hostexec.ErrConnect) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want ErrConnect saying %q", err, want)
	}
	// Through a jump host, the hop is named with the way to it.
	_, err = p.Runner(addr, "", Jump{Address: f.Hosts[0].Addr}).Run(ctx, hostexec.Command{Script: "true"})
	if want := "no SSH banner from " + addr + " within 500ms (through " + f.User + "@" + f.Hosts[0].Addr + ")"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("through a jump host: %v, want %q", err, want)
	}
}

// Cancelling a node whose host is still being connected to ends it at
// once, as cancelled, however long the connect timeout.
func TestCancelDuringConnectEndsAtOnce(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, InsecureIgnoreHostKey: true, ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	addr := sshtest.Silent(t)
	r := p.Runner(addr, "")
	for i := range 2 { // the caller that started the dial, and one that joined it
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := r.Run(ctx, hostexec.Command{Script: "true"})
			done <- err
		}()
		time.Sleep(200 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, hostexec.ErrCancelled) {
				t.Fatalf("caller %d: %v, want ErrCancelled", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("caller %d: still connecting 5s after its cancel", i)
		}
	}
}

// A host that stops answering in the middle of a command (its sshd and
// everything below it stopped) is found by keepalives: the command's
// connection is closed and the run ends with an error, long before the
// command would have.
func TestKeepaliveFindsAHungHost(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User,
		Keepalive: 100 * time.Millisecond, ConnectTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := p.Runner(f.Hosts[0].Addr, "").Run(ctx, hostexec.Command{Script: "echo up; sleep 50", OnLine: func(hostexec.Stream, string) { once.Do(func() { close(started) }) }})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not start")
	}
	thaw := f.Hosts[0].Freeze()
	defer thaw()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the run succeeded on a hung host")
		}
		t.Logf("ended with: %v", err)
	case <-ctx.Done():
		t.Fatal("the run on a hung host was still waiting after 60s (keepalive every 100ms)")
	}
}

// A durable command whose host stops answering while it runs (sshd and
// all below it frozen): the keepalives close the connection within
// (KeepaliveMissed+1) intervals, the one re-attach fails within the
// connect timeout, and Run returns an error naming the host and saying
// it stopped answering keepalives, then why the re-attach failed.
func TestKeepaliveNamesTheHostThatStoppedAnswering(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	const keepalive, connect = 200 * time.Millisecond, 500 * time.Millisecond
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User, Keepalive: keepalive, ConnectTimeout: connect})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	l := linestest.New("up")
	done := make(chan error, 1)
	go func() {
		cmd := hostexec.Attempt{ID: "frozen-1", Command: hostexec.Command{Script: "echo up; sleep 50", OnLine: l.On, Env: map[string]string{"GANTRY_ATTEMPTS": t.TempDir()}}}
		_, err := p.Runner(f.Hosts[0].Addr, "").RunAttempt(context.Background(), cmd)
		done <- err
	}()
	l.Wait(t, "up")
	time.Sleep(3 * keepalive) // answered keepalives
	thaw := f.Hosts[0].Freeze()
	defer thaw()
	frozen := time.Now()
	bound := keepalive*time.Duration(KeepaliveMissed+1) + reattachWait + connect + 3*time.Second
	select {
	case err := <-done:
		took := time.Since(frozen)
		t.Logf("ended %s after the freeze with: %v", took.Round(time.Millisecond), err)
		if err == nil {
			t.Fatal("the run succeeded on a hung host")
		}
		for _, want := range []string{f.Hosts[0].Addr, "stopped answering", "no answer to SSH keepalives", "re-attaching to the attempt: cannot connect"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q", want)
			}
		}
		if took > bound {
			t.Errorf("ended %s after the freeze, want within %s", took.Round(time.Millisecond), bound)
		}
	case <-time.After(bound + 30*time.Second):
		t.Fatalf("the run on a hung host was still waiting %s after the freeze", bound+30*time.Second)
	}
}
