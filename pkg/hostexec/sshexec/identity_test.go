package sshexec

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// serveAgent serves kr on a unix socket and returns its path (a pool's
// AgentSocket).
func serveAgent(t *testing.T, kr agent.Agent) string {
	t.Helper()
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
	return sock
}

// authorizeOnly makes host i of a fleet accept only the keys given (its
// own authorized_keys file, named first in its sshd_config).
func authorizeOnly(t *testing.T, file string, keys ...ssh.PublicKey) {
	t.Helper()
	var b []byte
	for _, k := range keys {
		b = append(b, ssh.MarshalAuthorizedKey(k)...)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func echo(t *testing.T, r hostexec.Runner) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := r.Run(ctx, hostexec.Command{Script: "echo in"})
	if err == nil && res.Stdout != "in\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	return err
}

// Each host is offered its own identity file, not the worker's key: two
// hosts, each authorizing one of two keys, are both reached, each with its
// key; and a host reached with one key never shares the connection of the
// same user@address reached with another (the wrong key is refused even
// after the right one connected). A leading ~ is the worker's home, as
// its main gave it (SSHConfig.Home), whatever the process's $HOME.
func TestIdentityFilePerHost(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", filepath.Join(dir, "not-the-home"))
	auth0, auth1 := filepath.Join(dir, "auth0"), filepath.Join(dir, "auth1")
	k0 := sshtest.NewKey(t, filepath.Join(dir, "k0"))
	k1 := sshtest.NewKey(t, filepath.Join(dir, "k1"))
	authorizeOnly(t, auth0, k0)
	authorizeOnly(t, auth1, k1)
	f := sshtest.Start(t, 2, sshtest.Options{HostConfig: map[int][]string{0: {"AuthorizedKeysFile " + auth0}, 1: {"AuthorizedKeysFile " + auth1}}})
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User, Home: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	h0, h1 := f.Hosts[0].Addr, f.Hosts[1].Addr
	if err := echo(t, p.HostRunner(Jump{Address: h0, IdentityFile: "~/k0"})); err != nil {
		t.Fatalf("host-0 with k0: %v", err)
	}
	if err := echo(t, p.HostRunner(Jump{Address: h1, IdentityFile: filepath.Join(dir, "k1")})); err != nil {
		t.Fatalf("host-1 with k1: %v", err)
	}
	for _, c := range []struct {
		name string
		h    Jump
	}{
		{"host-0 with k1", Jump{Address: h0, IdentityFile: filepath.Join(dir, "k1")}},
		{"host-1 with k0", Jump{Address: h1, IdentityFile: "~/k0"}},
		{"host-0 with the worker's key", Jump{Address: h0}},
	} {
		if err := echo(t, p.HostRunner(c.h)); !errors.Is(err, hostexec.ErrAuth) {
			t.Errorf("%s: err %v, want ErrAuth: the host's identity file is offered, not another's", c.name, err)
		}
	}
}

// An identity file that cannot be used fails the command before anything
// runs, with ErrIdentity, naming the file and what is wrong with it.
func TestIdentityFileUnusable(t *testing.T) {
	dir := t.TempDir()
	f := sshtest.Start(t, 1, sshtest.Options{})
	notKey := filepath.Join(dir, "notkey")
	if err := os.WriteFile(notKey, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	enc := filepath.Join(dir, "enc")
	sshtest.NewEncryptedKey(t, enc, "pass phrase")
	wrongCert := filepath.Join(dir, "wrong")
	sshtest.NewKey(t, wrongCert)
	other := filepath.Join(dir, "other")
	sshtest.NewKey(t, other)
	sshtest.SignUserCert(t, sshtest.NewCA(t, ""), other, f.User)
	if err := os.Rename(other+"-cert.pub", wrongCert+"-cert.pub"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing"), filepath.Join(dir, "missing") + ": no such file or directory"},
		{dir, dir + ": is a directory"},
		{notKey, notKey + " is not a private key"},
		{enc, enc + " is encrypted and no ssh-agent holds it: add it with ssh-add " + enc},
		{wrongCert, "certificate " + wrongCert + "-cert.pub is not for the key " + wrongCert},
	} {
		p := newPool(t, f, f.KnownHosts)
		start := time.Now()
		err := echo(t, p.HostRunner(Jump{Address: f.Hosts[0].Addr, IdentityFile: c.path}))
		if !errors.Is(err, hostexec.ErrIdentity) || !errors.Is(err, hostexec.ErrConnect) || !strings.Contains(err.Error(), "identity_file "+c.want) {
			t.Errorf("identity_file %s: err %v, want ErrIdentity saying %q", c.path, err, c.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("identity_file %s: failed after %s", c.path, d)
		}
	}
}

// An encrypted identity file is used through the ssh-agent when the agent
// holds its key (gantry never asks for a passphrase).
func TestEncryptedIdentityThroughAgent(t *testing.T) {
	dir := t.TempDir()
	f := sshtest.Start(t, 1, sshtest.Options{})
	enc := filepath.Join(dir, "enc")
	pub := sshtest.NewEncryptedKey(t, enc, "pass phrase")
	b, err := os.ReadFile(enc)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ssh.ParseRawPrivateKeyWithPassphrase(b, []byte("pass phrase"))
	if err != nil {
		t.Fatal(err)
	}
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: priv}); err != nil {
		t.Fatal(err)
	}
	sock := serveAgent(t, kr)
	authorizeOnly(t, filepath.Join(f.Dir, "authorized_keys"), pub)
	p, err := NewPool(SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User, UseAgent: true, AgentSocket: sock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := echo(t, p.HostRunner(Jump{Address: f.Hosts[0].Addr, IdentityFile: enc})); err != nil {
		t.Fatal(err)
	}
}

// A user certificate logs in where its plain key is not authorized (sshd
// trusts the CA: TrustedUserCAKeys): KEY-cert.pub beside a host's
// identity file, beside the worker's key, or named by --ssh-cert, and a
// certificate the ssh-agent holds. Without it the same key is refused.
func TestUserCertificateLogsIn(t *testing.T) {
	dir := t.TempDir()
	caPub := filepath.Join(dir, "ca.pub")
	ca := sshtest.NewCA(t, caPub)
	f := sshtest.Start(t, 1, sshtest.Options{ExtraConfig: []string{"TrustedUserCAKeys " + caPub}})
	addr := f.Hosts[0].Addr
	key := filepath.Join(dir, "id")
	sshtest.NewKey(t, key) // not in authorized_keys
	pool := func(cfg SSHConfig) *Pool {
		t.Helper()
		cfg.KnownHosts, cfg.DefaultUser = f.KnownHosts, f.User
		p, err := NewPool(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	if err := echo(t, pool(SSHConfig{KeyFile: f.KeyFile}).HostRunner(Jump{Address: addr, IdentityFile: key})); !errors.Is(err, hostexec.ErrAuth) {
		t.Fatalf("the plain key logged in (%v): the test proves nothing", err)
	}
	sshtest.SignUserCert(t, ca, key, f.User)
	if err := echo(t, pool(SSHConfig{KeyFile: f.KeyFile}).HostRunner(Jump{Address: addr, IdentityFile: key})); err != nil {
		t.Errorf("identity_file with KEY-cert.pub beside it: %v", err)
	}
	if err := echo(t, pool(SSHConfig{KeyFile: key}).Runner(addr, "")); err != nil {
		t.Errorf("--ssh-key with KEY-cert.pub beside it: %v", err)
	}
	elsewhere := filepath.Join(dir, "elsewhere-cert.pub")
	if err := os.Rename(key+"-cert.pub", elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := echo(t, pool(SSHConfig{KeyFile: key, CertFile: elsewhere}).Runner(addr, "")); err != nil {
		t.Errorf("--ssh-key with --ssh-cert: %v", err)
	}
	if _, err := NewPool(SSHConfig{KeyFile: f.KeyFile, CertFile: elsewhere, KnownHosts: f.KnownHosts}); err == nil || !strings.Contains(err.Error(), "is not for the key "+f.KeyFile) {
		t.Errorf("--ssh-cert for another key: %v, want the mismatch named", err)
	}

	// the agent's certificate, as it is
	b, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ssh.ParseRawPrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := os.ReadFile(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	cpub, _, _, _, err := ssh.ParseAuthorizedKey(cb)
	if err != nil {
		t.Fatal(err)
	}
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: priv.(*ed25519.PrivateKey), Certificate: cpub.(*ssh.Certificate)}); err != nil {
		t.Fatal(err)
	}
	sock := serveAgent(t, kr)
	if err := echo(t, pool(SSHConfig{KeyFile: f.KeyFile, UseAgent: true, AgentSocket: sock}).Runner(addr, "")); err != nil {
		t.Errorf("a certificate in the ssh-agent: %v", err)
	}
}
