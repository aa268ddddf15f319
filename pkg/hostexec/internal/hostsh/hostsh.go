// Package hostsh is the shell text both runners of pkg/hostexec send to
// a host, and what they read back from it: quoting, a command's
// environment and secrets as shell, the marker line a command starts
// with, and the durable attempt's scripts (its supervisor, lock, kill,
// cancel and settle) with the layout of its files on the host. It holds
// no state and starts nothing.
package hostsh

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Exports renders env as "export K='v'; " in a stable order.
func Exports(env map[string]string) (string, error) {
	keys := make([]string, 0, len(env))
	for k := range env {
		if !dag.IsEnvName(k) {
			return "", fmt.Errorf("environment variable name %q is not valid", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("export ")
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(Quote(env[k]))
		b.WriteString("; ")
	}
	return b.String(), nil
}

// ReadSecrets comes first in the text a host's shell runs for a command
// with secrets: it reads SecretLine from stdin with builtins only (no
// program start; the rest of stdin, empty, is the command's) and evaluates
// it. The line writes a newline in a value as "$1", set here: a positional
// parameter cannot clash with a variable's name. A line that did not
// arrive whole (the connection broke) runs nothing.
const ReadSecrets = ReadSecretLine + EvalSecrets

// ReadSecretLine and EvalSecrets are ReadSecrets' two halves: a durable
// command's supervisor reads the line first and evaluates it only in the
// command's own subshell, so that no secret reaches the supervisor's
// shell (see supervision).
const (
	ReadSecretLine = "IFS= read -r _gs || { echo 'gantry: the secrets did not arrive' >&2; exit 125; }; "
	EvalSecrets    = "set -- '\n'; eval \"$_gs\"; "
)

// SecretLine is the one line of shell that ReadSecrets evaluates: unset
// _gs first (a secret may have that name), export every secret, unset $1.
func SecretLine(secrets map[string]string) string {
	var b strings.Builder
	b.WriteString("unset _gs; ")
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		b.WriteString("export ")
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(strings.ReplaceAll(Quote(secrets[k]), "\n", `'"$1"'`))
		b.WriteString("; ")
	}
	b.WriteString("set --\n")
	return b.String()
}

// PIDMarker starts the first stdout line of every remote command: the
// shell sshd started is a session leader (sshd calls setsid), so its pid
// is the process group of everything the command runs.
const PIDMarker = "__gantry_pgid "

// Marked is what a command's first line says: its process group and, for a
// durable attempt, its directory.
type Marked struct {
	PGID int
	Dir  string
}

// MarkerSink parses the marker line into ch.
func MarkerSink(ch chan Marked) func(string) {
	return func(s string) {
		pgid, dir, _ := strings.Cut(strings.TrimSpace(s), " ")
		if n, err := strconv.Atoi(pgid); err == nil && n > 1 {
			ch <- Marked{PGID: n, Dir: dir}
		}
	}
}

// BoundStderr is the end of a command's stderr, at most 200 bytes, for an
// error.
func BoundStderr(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		s = "…" + strings.ToValidUTF8(s[len(s)-200:], "")
	}
	return s
}

// LastLine is the last line of s that is not empty, at most 1,024
// bytes: what a script said last on stderr.
func LastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}
