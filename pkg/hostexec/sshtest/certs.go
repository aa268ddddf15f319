package sshtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// NewCA makes a certificate authority's key for a test, and writes its
// public half to path (as TrustedUserCAKeys and @cert-authority lines
// take it) when path is not empty.
func NewCA(t testing.TB, path string) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if path != "" {
		if err := os.WriteFile(path, ssh.MarshalAuthorizedKey(s.PublicKey()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// NewKey writes a new unencrypted Ed25519 private key to path (and its
// public half to path.pub) and returns the public key.
func NewKey(t testing.TB, path string) ssh.PublicKey {
	t.Helper()
	pub, err := writeKey(path)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// NewEncryptedKey writes a new Ed25519 private key encrypted with
// passphrase to path (and its public half to path.pub).
func NewEncryptedKey(t testing.TB, path, passphrase string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(passphrase))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(sp), 0o644); err != nil {
		t.Fatal(err)
	}
	return sp
}

// SignHostCert makes a host certificate for key, signed by ca, valid for
// the host name or IP address principal, for ever.
func SignHostCert(ca ssh.Signer, key ssh.PublicKey, principal string) (*ssh.Certificate, error) {
	return sign(ca, key, ssh.HostCert, principal)
}

// SignUserCert writes a user certificate for the key at keyFile (its
// public half, keyFile.pub), signed by ca, for the login user, to
// keyFile-cert.pub, and returns it.
func SignUserCert(t testing.TB, ca ssh.Signer, keyFile, user string) *ssh.Certificate {
	t.Helper()
	b, err := os.ReadFile(keyFile + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := sign(ca, pub, ssh.UserCert, user)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile+"-cert.pub", ssh.MarshalAuthorizedKey(cert), 0o644); err != nil {
		t.Fatal(err)
	}
	return cert
}

func sign(ca ssh.Signer, key ssh.PublicKey, kind uint32, principal string) (*ssh.Certificate, error) {
	cert := &ssh.Certificate{
		Key:             key,
		Serial:          uint64(time.Now().UnixNano()),
		CertType:        kind,
		KeyId:           "sshtest " + principal,
		ValidPrincipals: []string{principal},
		ValidAfter:      uint64(time.Now().Add(-time.Hour).Unix()),
		ValidBefore:     ssh.CertTimeInfinity,
	}
	if kind == ssh.UserCert {
		cert.Permissions.Extensions = map[string]string{"permit-pty": ""}
	}
	return cert, cert.SignCert(rand.Reader, ca)
}
