package sshexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// caLine is an @cert-authority line for pattern.
func caLine(pattern string, ca ssh.PublicKey) string {
	return "@cert-authority " + pattern + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca)))
}

func revokedLine(key ssh.PublicKey) string {
	return "@revoked * " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
}

// Host certificates: a host presenting a certificate signed by a CA that
// an @cert-authority line of known_hosts trusts for it is accepted with
// no line for its own key; one signed by another CA is checked by its
// plain key, as OpenSSH does: refused as unknown (or changed) with the
// same advice as a plain key, naming both fingerprints. A key, or CA,
// that an @revoked line names is refused, naming the line.
func TestHostCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := sshtest.NewCA(t, "")
	f := sshtest.Start(t, 1, sshtest.Options{HostCA: ca})
	h := f.Hosts[0]
	pattern := knownhosts.Normalize(h.Addr)
	other := sshtest.NewCA(t, "")
	stranger := sshtest.NewKey(t, filepath.Join(dir, "stranger"))
	plain := knownhosts.Line([]string{pattern}, h.PublicKey)
	for _, c := range []struct {
		name  string
		lines []string
		want  error    // nil: accepted
		says  []string // in the error
	}{
		{"its CA", []string{caLine(pattern, ca.PublicKey())}, nil, nil},
		{"its CA by wildcard", []string{caLine("[127.0.0.*]:"+portOf(h.Addr), ca.PublicKey())}, nil, nil},
		{"another CA", []string{caLine(pattern, other.PublicKey())}, hostexec.ErrHostKeyUnknown,
			[]string{"offers a host certificate for a ssh-ed25519 key (" + ssh.FingerprintSHA256(h.PublicKey) + ") signed by the CA " + ssh.FingerprintSHA256(ca.PublicKey()), "no @cert-authority line in", "ssh-keyscan -p"}},
		{"its CA for another host", []string{caLine("[127.0.0.9]:22", ca.PublicKey())}, hostexec.ErrHostKeyUnknown, []string{"no @cert-authority line"}},
		{"another CA, its plain key recorded", []string{caLine(pattern, other.PublicKey()), plain}, nil, nil},
		{"another CA, another plain key recorded", []string{caLine(pattern, other.PublicKey()), knownhosts.Line([]string{pattern}, stranger)}, hostexec.ErrHostKeyChanged,
			[]string{"differs from the key recorded for it at " + filepath.Join(dir, "known") + ":2"}},
		{"its key revoked", []string{caLine(pattern, ca.PublicKey()), revokedLine(h.PublicKey)}, hostexec.ErrHostKeyRevoked,
			[]string{"marks @revoked", filepath.Join(dir, "known") + ":2"}},
		{"its CA revoked", []string{caLine(pattern, ca.PublicKey()), plain, revokedLine(ca.PublicKey())}, hostexec.ErrHostKeyRevoked,
			[]string{filepath.Join(dir, "known") + ":3"}},
	} {
		known := filepath.Join(dir, "known")
		if err := os.WriteFile(known, []byte(strings.Join(c.lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := echo(t, newPool(t, f, known).Runner(h.Addr, ""))
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: %v, want accepted", c.name, err)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		for _, s := range c.says {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %v, want it to say %q", c.name, err, s)
			}
		}
	}
}

// A plain host key that an @revoked line names is refused, though
// another line records it for the host.
func TestRevokedHostKey(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	h := f.Hosts[0]
	known := filepath.Join(t.TempDir(), "known")
	lines := knownhosts.Line([]string{knownhosts.Normalize(h.Addr)}, h.PublicKey) + "\n" + revokedLine(h.PublicKey) + "\n"
	if err := os.WriteFile(known, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	err := echo(t, newPool(t, f, known).Runner(h.Addr, ""))
	want := fmt.Sprintf("%s offers a ssh-ed25519 key (%s), which %s:2 marks @revoked; refusing to connect", h.Addr, ssh.FingerprintSHA256(h.PublicKey), known)
	if !errors.Is(err, hostexec.ErrHostKeyRevoked) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want ErrHostKeyRevoked saying %q", err, want)
	}
}
