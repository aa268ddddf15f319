package cli

import (
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
// server can read it, and the key it names.

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
	if err := os.MkdirAll(devNoteDir(), 0o700); err != nil {
		return nil, err
	}
	p := devNotePath(port)
	if err := os.WriteFile(p, []byte(seedFile+"\n"), 0o600); err != nil {
		return nil, err
	}
	return func() { _ = os.Remove(p) }, nil
}

// devOperatorKey is the operator's seed file of a `gantry dev` serving the
// loopback URL u, or "" when there is none.
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
	b, err := os.ReadFile(devNotePath(port))
	if err != nil {
		return ""
	}
	seed := strings.TrimSpace(string(b))
	if _, err := os.Stat(seed); err != nil {
		return ""
	}
	return seed
}
