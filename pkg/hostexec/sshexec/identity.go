package sshexec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"golang.org/x/crypto/ssh"
)

// Keys and user certificates. A host may name its own identity file (a
// private key on the worker, composition field identity_file); the others
// use the worker's key (--ssh-key, else OpenSSH's default ones). Beside a
// key, KEY-cert.pub is a user certificate for it, offered before the
// plain key, as OpenSSH does (--ssh-cert names the worker key's
// certificate elsewhere). The ssh-agent's keys follow, certificates
// among them as they are. Keys are read on the worker when a connection
// is set up; only their paths travel on the bus.

// expandHome resolves a leading ~ (or ~/) to home, the worker's home
// directory ("": none known).
func expandHome(path, home string) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") {
		return path, nil
	}
	if home == "" {
		return "", fmt.Errorf("%s: the worker's home directory is not known", path)
	}
	return filepath.Join(home, strings.TrimPrefix(path, "~")), nil
}

// keySigners reads the private key at path and the user certificate for
// it (cert; "" for path-cert.pub when there is one) and returns the
// signers to offer: the certificate's first. An encrypted key is used
// through the ssh-agent's signer for it, when agent holds it.
func keySigners(path, cert string, agent []ssh.Signer) ([]ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, pathErr(path, err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	var pp *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &pp):
		if signer = agentSignerFor(path, pp.PublicKey, agent); signer == nil {
			return nil, fmt.Errorf("%s is encrypted and no ssh-agent holds it: add it with ssh-add %s (gantry asks for no passphrase)", path, path)
		}
	case err != nil:
		return nil, fmt.Errorf("%s is not a private key gantry can read: %w", path, err)
	}
	certSigner, err := certSignerFor(path, cert, signer)
	if err != nil || certSigner == nil {
		return []ssh.Signer{signer}, err
	}
	return []ssh.Signer{certSigner, signer}, nil
}

// pathErr says what is wrong with a file, naming it once.
func pathErr(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// agentSignerFor is the agent's signer for the encrypted key at path (its
// public key pub, else read from path.pub), or nil.
func agentSignerFor(path string, pub ssh.PublicKey, agent []ssh.Signer) ssh.Signer {
	if pub == nil {
		b, err := os.ReadFile(path + ".pub")
		if err != nil {
			return nil
		}
		if pub, _, _, _, err = ssh.ParseAuthorizedKey(b); err != nil {
			return nil
		}
	}
	for _, s := range agent {
		if string(s.PublicKey().Marshal()) == string(pub.Marshal()) {
			return s
		}
	}
	return nil
}

// certSignerFor is the signer of the user certificate for signer's key:
// the file cert, or keyPath-cert.pub when cert is "" (nil, nil when there
// is none).
func certSignerFor(keyPath, cert string, signer ssh.Signer) (ssh.Signer, error) {
	explicit := cert != ""
	if !explicit {
		cert = keyPath + "-cert.pub"
	}
	b, err := os.ReadFile(cert)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("certificate %w", pathErr(cert, err))
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: %w", cert, err)
	}
	c, ok := pub.(*ssh.Certificate)
	if !ok || c.CertType != ssh.UserCert {
		return nil, fmt.Errorf("certificate %s: not a user certificate", cert)
	}
	s, err := ssh.NewCertSigner(c, signer)
	if err != nil {
		return nil, fmt.Errorf("certificate %s is not for the key %s", cert, keyPath)
	}
	return s, nil
}

// identitySigners are the signers of a host's identity file (resolved
// already), an ErrIdentity when it cannot be used.
func identitySigners(path string, agent []ssh.Signer) ([]ssh.Signer, error) {
	s, err := keySigners(path, "", agent)
	if err != nil {
		return nil, fmt.Errorf("%w: identity_file %w", hostexec.ErrIdentity, err)
	}
	return s, nil
}
