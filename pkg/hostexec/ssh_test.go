package hostexec

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// startAgent serves a keyring holding one new key on a unix socket, points
// SSH_AUTH_SOCK at it and returns the key's public half.
func startAgent(t *testing.T) ssh.PublicKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: priv, Comment: "test agent key"}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = agent.ServeAgent(kr, c)
			}()
		}
	}()
	t.Setenv("SSH_AUTH_SOCK", sock)
	signers, err := kr.Signers()
	if err != nil {
		t.Fatal(err)
	}
	return signers[0].PublicKey()
}

// With a key file given, the agent's keys are offered too: the host
// accepts only the agent's key here.
func TestAgentKeysOfferedWithKeyFile(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	agentKey := startAgent(t)
	// sshd reads AuthorizedKeysFile at each login: from now on only the
	// agent's key gets in, not the key file's.
	if err := os.WriteFile(filepath.Join(f.Dir, "authorized_keys"), ssh.MarshalAuthorizedKey(agentKey), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, UseAgent: true, KnownHosts: f.KnownHosts, DefaultUser: f.User})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	res, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), Command{Script: "echo in"})
	if err != nil || res.Stdout != "in\n" {
		t.Fatalf("with --ssh-key and an agent holding the accepted key: %+v %v", res, err)
	}
	// and the key file alone is still offered when the agent is gone
	t.Setenv("SSH_AUTH_SOCK", filepath.Join(t.TempDir(), "gone.sock"))
	if err := os.WriteFile(filepath.Join(f.Dir, "authorized_keys"), mustRead(t, f.KeyFile+".pub"), 0o600); err != nil {
		t.Fatal(err)
	}
	p2, err := NewPool(SSHConfig{KeyFile: f.KeyFile, UseAgent: true, KnownHosts: f.KnownHosts, DefaultUser: f.User})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p2.Close)
	if _, err := p2.Runner(f.Hosts[0].Addr, "").Run(context.Background(), Command{Script: "true"}); err != nil {
		t.Fatalf("key file with the agent unreachable: %v", err)
	}
}

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
	hosts := NewHosts(HostsConfig{SSH: SSHConfig{KeyFile: f.KeyFile, KnownHosts: known, DefaultUser: f.User}})
	t.Cleanup(hosts.Close)
	run := func() error {
		r, err := hosts.Runner(Target{Transport: "ssh", Address: f.Hosts[0].Addr})
		if err != nil {
			return err
		}
		_, err = r.Run(context.Background(), Command{Script: "true"})
		return err
	}
	err := run()
	if !errors.Is(err, ErrHostKeyUnknown) || !strings.Contains(err.Error(), "ssh-keyscan") {
		t.Fatalf("err = %v, want ErrHostKeyUnknown with the ssh-keyscan advice", err)
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
	if err := run(); !errors.Is(err, ErrHostKeyUnknown) {
		t.Fatalf("after removing the host's key: err = %v, want ErrHostKeyUnknown", err)
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
	hosts := NewHosts(HostsConfig{SSH: SSHConfig{KeyFile: f.KeyFile, KnownHosts: known, DefaultUser: f.User}})
	t.Cleanup(hosts.Close)
	r, err := hosts.Runner(Target{Transport: "ssh", Address: f.Hosts[0].Addr})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(context.Background(), Command{Script: "touch " + f.Hosts[0].Dir + "/ran"})
	if !errors.Is(err, ErrHostKeyChanged) || errors.Is(err, ErrHostKeyUnknown) {
		t.Fatalf("err = %v, want ErrHostKeyChanged", err)
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

// A host with several host keys, of which known_hosts records one type
// only (as interactive OpenSSH often leaves it), is asked for that type:
// the client library on its own prefers ECDSA over Ed25519, and the host's
// unrecorded ECDSA key would look like a changed key.
func TestRecordedHostKeyTypeAsked(t *testing.T) {
	ecKey := filepath.Join(t.TempDir(), "ssh_host_ecdsa_key")
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ecKey, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	// known_hosts holds each host's Ed25519 key only
	f := sshtest.Start(t, 1, sshtest.Options{ExtraConfig: []string{"HostKey " + ecKey}})
	p := newPool(t, f, f.KnownHosts)
	if _, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), Command{Script: "true"}); err != nil {
		t.Fatalf("host offering Ed25519 (recorded) and ECDSA (not recorded): %v", err)
	}
}

// A setup that failed (here known_hosts did not exist yet) is tried again
// at the next use instead of failing every later SSH node until a restart.
func TestHostsSetupRetried(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	known := filepath.Join(t.TempDir(), "known_hosts")
	hosts := NewHosts(HostsConfig{SSH: SSHConfig{KeyFile: f.KeyFile, KnownHosts: known, DefaultUser: f.User}})
	t.Cleanup(hosts.Close)
	if _, err := hosts.Runner(Target{Transport: "ssh", Address: f.Hosts[0].Addr}); !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), known) {
		t.Fatalf("err = %v, want ErrConnect naming %s", err, known)
	}
	if err := os.WriteFile(known, mustRead(t, f.KnownHosts), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := hosts.Runner(Target{Transport: "ssh", Address: f.Hosts[0].Addr})
	if err != nil {
		t.Fatalf("after creating %s: %v", known, err)
	}
	if _, err := r.Run(context.Background(), Command{Script: "true"}); err != nil {
		t.Fatal(err)
	}
}
