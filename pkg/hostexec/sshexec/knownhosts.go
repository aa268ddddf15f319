package sshexec

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Host keys are checked against known_hosts as OpenSSH does, host
// certificates included: a host that presents a certificate signed by a
// CA that an @cert-authority line trusts for it is accepted (the library's
// ssh.CertChecker checks the signature, the principal and the validity);
// one whose certificate no such line accepts is checked by its plain key,
// as OpenSSH falls back to it. A key (or certificate, or the CA that
// signed it) that an @revoked line names is refused, whatever else the
// file says.

// knownHosts is the known_hosts file, read again when it changed (size,
// modification time or the file itself), so that a key added or removed
// counts from the next connection on, without a restart.
type knownHosts struct {
	path string
	mu   sync.Mutex
	fi   os.FileInfo // of the file as last read
	db   *knownDB
}

// knownDB is known_hosts as read once: the library's callback, and the
// lines with markers, which the callback does not tell apart.
type knownDB struct {
	cb      ssh.HostKeyCallback
	cas     map[string]bool                // @cert-authority keys
	revoked map[string]knownhosts.KnownKey // @revoked keys, by key
}

// current returns the file as it is now; force reads it again even when
// it looks unchanged.
func (k *knownHosts) current(force bool) (*knownDB, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	fail := func(err error) error {
		var pe *fs.PathError
		if errors.As(err, &pe) { // the path is said once
			err = pe.Err
		}
		return fmt.Errorf("known_hosts %s: %w (set --known-hosts / GANTRY_KNOWN_HOSTS)", k.path, err)
	}
	fi, err := os.Stat(k.path)
	if err != nil {
		return nil, fail(err)
	}
	if !force && k.db != nil && os.SameFile(k.fi, fi) && k.fi.Size() == fi.Size() && k.fi.ModTime().Equal(fi.ModTime()) {
		return k.db, nil
	}
	// Stat before reading: a change made meanwhile shows at the next call.
	cb, err := knownhosts.New(k.path)
	if err != nil {
		return nil, fail(err)
	}
	db := &knownDB{cb: cb}
	if err := db.readMarkers(k.path); err != nil {
		return nil, fail(err)
	}
	k.fi, k.db = fi, db
	return db, nil
}

// readMarkers notes the @cert-authority and @revoked lines of the file
// (knownhosts.New has checked its syntax).
func (db *knownDB) readMarkers(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	db.cas, db.revoked = map[string]bool{}, map[string]knownhosts.KnownKey{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '@' {
			continue
		}
		marker, _, key, _, _, err := ssh.ParseKnownHosts(line)
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		switch marker {
		case "cert-authority":
			db.cas[string(key.Marshal())] = true
		case "revoked":
			db.revoked[string(key.Marshal())] = knownhosts.KnownKey{Key: key, Filename: path, Line: n}
		}
	}
	return sc.Err()
}

// revokedLine is the @revoked line naming key, the key a certificate
// certifies, or the CA that signed it; nil when none does.
func (db *knownDB) revokedLine(key ssh.PublicKey) *knownhosts.KnownKey {
	keys := []ssh.PublicKey{key}
	if c, ok := key.(*ssh.Certificate); ok {
		keys = []ssh.PublicKey{c.Key, c.SignatureKey}
	}
	for _, k := range keys {
		if r, ok := db.revoked[string(k.Marshal())]; ok {
			return &r
		}
	}
	return nil
}

// hostKeyRefused is a host key that known_hosts does not accept: ke lists
// the plain keys recorded for the host (none: it is unknown). cert is the
// certificate the host presented, if any, and why no @cert-authority
// line accepted it.
type hostKeyRefused struct {
	ke      *knownhosts.KeyError
	cert    *ssh.Certificate
	certWhy error
}

func (e *hostKeyRefused) Error() string { return e.ke.Error() }

// hostKeyRevoked is a host key an @revoked line names.
type hostKeyRevoked struct{ line knownhosts.KnownKey }

func (e *hostKeyRevoked) Error() string { return "knownhosts: key is revoked" }

// check checks a host's key: nil, a *hostKeyRevoked, a *hostKeyRefused
// or another error of the library's.
func (db *knownDB) check(host string, remote net.Addr, key ssh.PublicKey) error {
	if r := db.revokedLine(key); r != nil {
		return &hostKeyRevoked{line: *r}
	}
	err := db.cb(host, remote, key)
	if err == nil {
		return nil
	}
	cert, isCert := key.(*ssh.Certificate)
	if !isCert {
		return db.refused(err, nil, nil)
	}
	// OpenSSH: a certificate no @cert-authority line accepts is checked
	// as the plain key it certifies.
	plain := db.cb(host, remote, cert.Key)
	if plain == nil {
		return nil
	}
	return db.refused(plain, cert, err)
}

// refused turns the library's key error into a hostKeyRefused that lists
// only the plain keys recorded for the host: the library lists the
// @cert-authority lines that match it as well, which are no host's key.
func (db *knownDB) refused(err error, cert *ssh.Certificate, certWhy error) error {
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) {
		if cert != nil {
			return fmt.Errorf("host certificate: %w; its key: %w", certWhy, err)
		}
		return err
	}
	plain := &knownhosts.KeyError{}
	for _, w := range ke.Want {
		if !db.cas[string(w.Key.Marshal())] {
			plain.Want = append(plain.Want, w)
		}
	}
	return &hostKeyRefused{ke: plain, cert: cert, certWhy: certWhy}
}

// check checks a host's key against db. A key that is not accepted is
// checked again against the file read anew, in case it changed within the
// resolution of its modification time.
func (k *knownHosts) check(db *knownDB, host string, remote net.Addr, key ssh.PublicKey) error {
	err := db.check(host, remote, key)
	var refused *hostKeyRefused
	if !errors.As(err, &refused) {
		return err
	}
	again, rerr := k.current(true)
	if rerr != nil {
		return rerr
	}
	return again.check(host, remote, key)
}

// probeKey is a key that no known_hosts lists: checking it for a host
// returns the keys recorded for that host.
var probeKey = sync.OnceValue(func() ssh.PublicKey {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return k
})

// certAlgorithms are the host certificate types, most preferred first.
var certAlgorithms = []string{ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoECDSA384v01, ssh.CertAlgoECDSA521v01, ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01}

// hostKeyAlgorithms asks the host for a certificate first when an
// @cert-authority line matches it, then for the types of key that
// known_hosts records for it, then the others, as OpenSSH does. Without
// it a host with several keys (Ed25519, ECDSA, RSA) shows the one the
// library prefers (ECDSA), and when known_hosts records another type of
// key for it, the host looks as if its key had changed. nil (the
// library's default, certificates first) when nothing is recorded for the
// host.
func hostKeyAlgorithms(db *knownDB, address string, remote net.Addr) []string {
	var ke *knownhosts.KeyError
	if !errors.As(db.cb(address, remote, probeKey()), &ke) || len(ke.Want) == 0 {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a ...string) {
		for _, x := range a {
			if !seen[x] {
				seen[x] = true
				algos = append(algos, x)
			}
		}
	}
	for _, w := range ke.Want {
		if db.cas[string(w.Key.Marshal())] {
			add(certAlgorithms...)
		}
	}
	for _, w := range ke.Want {
		switch t := w.Key.Type(); {
		case db.cas[string(w.Key.Marshal())]:
		case t == ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	add(ssh.SupportedAlgorithms().HostKeys...)
	return algos
}

// hostKeyError says why a host's key was refused. known_hosts lists no key
// for the host: it is unknown, and the advice is how to add it. It lists
// another key: the key changed, which is what an interception looks like,
// so the message names the recorded lines and gives no command that would
// trust the new key. Both give the offered key's fingerprint to check,
// and for a certificate, its CA's and why it was not accepted. A revoked
// key names the @revoked line.
//
// A host behind jump hosts (jumps: user@address of each, first hop first)
// is scanned from the last jump host, which reaches it.
func hostKeyError(address, file string, key ssh.PublicKey, err error, jumps []string) error {
	var rv *hostKeyRevoked
	if errors.As(err, &rv) {
		return fmt.Errorf("%w: %s offers %s, which %s:%d marks @revoked; refusing to connect", hostexec.ErrHostKeyRevoked, address, describeKey(key), rv.line.Filename, rv.line.Line)
	}
	var kr *hostKeyRefused
	if !errors.As(err, &kr) {
		return nil
	}
	offers, unknown, changed := describeKey(key)+" that is not in "+file, "", " that differs from the key"
	if kr.cert != nil {
		offers = fmt.Sprintf("%s that no @cert-authority line in %s accepts (%v), and whose key is not in %s either", describeKey(key), file, kr.certWhy, file)
		unknown = ", or an @cert-authority line for its CA"
		changed = fmt.Sprintf(" that no @cert-authority line accepts (%v), and whose key differs from the key", kr.certWhy)
	}
	if len(kr.ke.Want) == 0 {
		scan := ""
		if n := len(jumps); n > 0 {
			scan = "ssh "
			if n > 1 {
				scan += "-J " + strings.Join(jumps[:n-1], ",") + " "
			}
			scan += "ssh://" + jumps[n-1] + " "
		}
		return fmt.Errorf("%w: %s offers %s; refusing to connect (check it, then add it: %sssh-keyscan -p %s %s >> %s%s)",
			hostexec.ErrHostKeyUnknown, address, offers, scan, portOf(address), hostOf(address), file, unknown)
	}
	recorded := make([]string, len(kr.ke.Want))
	for i, w := range kr.ke.Want {
		recorded[i] = fmt.Sprintf("%s:%d", w.Filename, w.Line)
	}
	return fmt.Errorf("%w: %s now offers %s%s recorded for it at %s; refusing to connect: someone may be intercepting the connection, or the host was reinstalled (check the new key with the host's owner before replacing that line)",
		hostexec.ErrHostKeyChanged, address, describeKey(key), changed, strings.Join(recorded, ", "))
}

// describeKey names a host key by type and fingerprint: "a
// ssh-ed25519 key (SHA256:...)", or for a certificate its key's and its
// CA's.
func describeKey(key ssh.PublicKey) string {
	c, ok := key.(*ssh.Certificate)
	if !ok {
		return fmt.Sprintf("a %s key (%s)", key.Type(), ssh.FingerprintSHA256(key))
	}
	return fmt.Sprintf("a host certificate for a %s key (%s) signed by the CA %s", c.Key.Type(), ssh.FingerprintSHA256(c.Key), ssh.FingerprintSHA256(c.SignatureKey))
}
