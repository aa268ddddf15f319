package transport

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The advice of the unknown-key error works without a restart: once the
// key is appended to known_hosts, the next dial of the same Hosts succeeds.
func TestKnownHostsAppendTakesEffect(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte("# nothing known yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hosts := NewHosts(HostsConfig{SSH: sshexec.SSHConfig{KeyFile: f.KeyFile, KnownHosts: known, DefaultUser: f.User}})
	t.Cleanup(hosts.Close)
	run := func() error {
		r, err := hosts.Runner(Target{Transport: "ssh", Address: f.Hosts[0].Addr})
		if err != nil {
			return err
		}
		_, err = r.Run(context.Background(), hostexec.Command{Script: "true"})
		return err
	}
	err := run()
	if !errors.Is(err, hostexec.ErrHostKeyUnknown) || !strings.Contains(err.Error(), "ssh-keyscan") {
		t.Fatalf("err = %v, want hostexec.ErrHostKeyUnknown with the ssh-keyscan advice", err)
	}
	// what the advice says to do (ssh-keyscan against the test sshd)
	host, port, _ := net.SplitHostPort(f.Hosts[0].Addr)
	line, kerr := exec.Command("ssh-keyscan", "-p", port, "-t", "ed25519", host).Output()
	if kerr != nil || len(line) == 0 {
		t.Logf("ssh-keyscan unavailable (%v): appending the fleet's line instead", kerr)
		line = mustRead(t, f.KnownHosts)
	}
	fh, err := os.OpenFile(known, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(line); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	if err := run(); err != nil {
		t.Fatalf("after appending the host's key to %s: %v", known, err)
	}
	// and a key taken out is no longer trusted from the next connection on
	hosts.Close()
	if err := os.WriteFile(known, []byte("# nothing known now\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(); !errors.Is(err, hostexec.ErrHostKeyUnknown) {
		t.Fatalf("after removing the host's key: err = %v, want hostexec.ErrHostKeyUnknown", err)
	}
}

// A host whose key differs from the one recorded is reported as changed
// (possible interception), naming the host and the file and line of the
// recorded key, not as unknown.
func TestChangedHostKeyReported(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherPub, err := ssh.NewPublicKey(other.Public())
	if err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(t.TempDir(), "known_hosts")
	content := "# recorded earlier\n" + knownhosts.Line([]string{knownhosts.Normalize(f.Hosts[0].Addr)}, otherPub) + "\n"
	if err := os.WriteFile(known, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	hosts := NewHosts(HostsConfig{SSH: sshexec.SSHConfig{KeyFile: f.KeyFile, KnownHosts: known, DefaultUser: f.User}})
	t.Cleanup(hosts.Close)
	r, err := hosts.Runner(Target{Transport: "ssh", Address: f.Hosts[0].Addr})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(context.Background(), hostexec.Command{Script: "touch " + f.Hosts[0].Dir + "/ran"})
	if !errors.Is(err, hostexec.ErrHostKeyChanged) || errors.Is(err, hostexec.ErrHostKeyUnknown) {
		t.Fatalf("err = %v, want hostexec.ErrHostKeyChanged", err)
	}
	msg := err.Error()
	t.Logf("refused: %s", msg)
	for _, want := range []string{"changed", f.Hosts[0].Addr, fmt.Sprintf("%s:2", known)} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "unknown") || strings.Contains(msg, "ssh-keyscan") {
		t.Errorf("message %q calls a changed key unknown", msg)
	}
	if _, serr := os.Stat(f.Hosts[0].Dir + "/ran"); serr == nil {
		t.Fatal("the command ran on a host whose key changed")
	}
}

// A setup that failed (here known_hosts did not exist yet) is tried again
// at the next use instead of failing every later SSH node until a restart.
func TestHostsSetupRetried(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	known := filepath.Join(t.TempDir(), "known_hosts")
	hosts := NewHosts(HostsConfig{SSH: sshexec.SSHConfig{KeyFile: f.KeyFile, KnownHosts: known, DefaultUser: f.User}})
	t.Cleanup(hosts.Close)
	if _, err := hosts.Runner(Target{Transport: "ssh", Address: f.Hosts[0].Addr}); !errors.Is(err, hostexec.ErrConnect) || !strings.Contains(err.Error(), known) {
		t.Fatalf("err = %v, want hostexec.ErrConnect naming %s", err, known)
	}
	if err := os.WriteFile(known, mustRead(t, f.KnownHosts), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := hosts.Runner(Target{Transport: "ssh", Address: f.Hosts[0].Addr})
	if err != nil {
		t.Fatalf("after creating %s: %v", known, err)
	}
	if _, err := r.Run(context.Background(), hostexec.Command{Script: "true"}); err != nil {
		t.Fatal(err)
	}
}
