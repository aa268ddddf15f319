package sshexec

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// startAgent serves a keyring holding one new key on a unix socket and
// returns the key's public half and the socket.
func startAgent(t *testing.T) (ssh.PublicKey, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: priv, Comment: "test agent key"}); err != nil {
		t.Fatal(err)
	}
	sock := serveAgent(t, kr)
	signers, err := kr.Signers()
	if err != nil {
		t.Fatal(err)
	}
	return signers[0].PublicKey(), sock
}

// With a key file given, the agent's keys are offered too: the host
// accepts only the agent's key here.
func TestAgentKeysOfferedWithKeyFile(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	agentKey, sock := startAgent(t)
	// sshd reads AuthorizedKeysFile at each login: from now on only the
	// agent's key gets in, not the key file's.
	if err := os.WriteFile(filepath.Join(f.Dir, "authorized_keys"), ssh.MarshalAuthorizedKey(agentKey), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, UseAgent: true, AgentSocket: sock, KnownHosts: f.KnownHosts, DefaultUser: f.User})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	res, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "echo in"})
	if err != nil || res.Stdout != "in\n" {
		t.Fatalf("with --ssh-key and an agent holding the accepted key: %+v %v", res, err)
	}
	// and the key file alone is still offered when the agent is gone
	gone := filepath.Join(t.TempDir(), "gone.sock")
	if err := os.WriteFile(filepath.Join(f.Dir, "authorized_keys"), mustRead(t, f.KeyFile+".pub"), 0o600); err != nil {
		t.Fatal(err)
	}
	p2, err := NewPool(SSHConfig{KeyFile: f.KeyFile, UseAgent: true, AgentSocket: gone, KnownHosts: f.KnownHosts, DefaultUser: f.User})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p2.Close)
	if _, err := p2.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "true"}); err != nil {
		t.Fatalf("key file with the agent unreachable: %v", err)
	}
}

// A pool reads no environment: an ssh-agent that $SSH_AUTH_SOCK names is
// not used unless its socket is in the settings (the service's main puts
// it there, ReadEnv).
func TestPoolUsesTheAgentItIsGivenOnly(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	agentKey, sock := startAgent(t)
	if err := os.WriteFile(filepath.Join(f.Dir, "authorized_keys"), ssh.MarshalAuthorizedKey(agentKey), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSH_AUTH_SOCK", sock)
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, UseAgent: true, KnownHosts: f.KnownHosts, DefaultUser: f.User})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if _, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "true"}); !errors.Is(err, hostexec.ErrAuth) {
		t.Fatalf("err %v, want ErrAuth: the agent of $SSH_AUTH_SOCK was used though the settings name none", err)
	}
	var c SSHConfig
	c.ReadEnv(func(k string) (string, bool) {
		return map[string]string{"SSH_AUTH_SOCK": sock}[k], k == "SSH_AUTH_SOCK"
	})
	if c.AgentSocket != sock {
		t.Fatalf("ReadEnv: AgentSocket %q, want %q", c.AgentSocket, sock)
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
	if _, err := p.Runner(f.Hosts[0].Addr, "").Run(context.Background(), hostexec.Command{Script: "true"}); err != nil {
		t.Fatalf("host offering Ed25519 (recorded) and ECDSA (not recorded): %v", err)
	}
}
