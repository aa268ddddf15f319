package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A running `gantry dev` leaves a note, per port, of where its operator's
// nkey is, so the CLI on the same machine finds it with no flags. The note
// is in the user's runtime directory: only the user who started the dev
// server can read it, and the key it names. With no XDG_RUNTIME_DIR the
// directory is gantry-<uid> under the shared temporary directory, used
// only when it is this user's own (privateDir); the note is written and
// read without following a symlink, and read only when this user owns it.

func devNoteDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "gantry")
	}
	return filepath.Join(os.TempDir(), "gantry-"+uidString())
}

func uidString() string { return strconv.Itoa(os.Getuid()) }

func devNotePath(port string) string { return filepath.Join(devNoteDir(), "dev-"+port+".nk-path") }

// writeDevNote records the operator's seed file for the dev server on port.
func writeDevNote(port, seedFile string) (remove func(), err error) {
	if err := privateDir(devNoteDir()); err != nil {
		return nil, err
	}
	p := devNotePath(port)
	if err := writePrivateFile(p, []byte(seedFile+"\n")); err != nil {
		return nil, err
	}
	return func() { _ = os.Remove(p) }, nil
}

// readDevNote is the seed file the note for port names; an error that is
// not fs.ErrNotExist says why a note there is not trusted.
func readDevNote(port string) (string, error) {
	if err := checkPrivateDir(devNoteDir()); err != nil {
		return "", err
	}
	b, err := readPrivateFile(devNotePath(port), 4096)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// devOperatorKey is the operator's seed file of a `gantry dev` serving the
// loopback URL u, or "" when there is none. A note it does not trust (a
// symlink, someone else's) it ignores, saying why on stderr.
func devOperatorKey(u string) string {
	pu, err := url.Parse(strings.Split(u, ",")[0])
	if err != nil {
		return ""
	}
	host, port := pu.Hostname(), pu.Port()
	if port == "" {
		port = "4222"
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return ""
	}
	seed, err := readDevNote(port)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "gantry: ignoring the note of a gantry dev on port %s: %v\n", port, err)
		}
		return ""
	}
	if _, err := os.Stat(seed); err != nil {
		return ""
	}
	return seed
}
