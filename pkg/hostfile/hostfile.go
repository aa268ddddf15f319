// Package hostfile places files on hosts and compares them with what a
// host has, through a hostexec.Runner (SSH or local), with small POSIX sh
// scripts and coreutils (stat, sha256sum, mktemp, chmod, chown, mv, head,
// base64): no agent is installed. A file's content travels on the
// command's stdin, streamed, never on a command line; it is written to a
// temporary file in the target's directory, checked against its SHA-256,
// given its mode and owner, and renamed over the target, so the path
// holds the old file or the new one, never a part. A file whose content,
// mode and owner already match is not touched (its mtime stays).
//
// Compare writes nothing: operation check, and drift, ask what differs
// with it.
package hostfile

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// Want is a file as it should be on a host.
type Want struct {
	Path string
	// Mode, when HasMode, is the file's permission bits (at most 07777);
	// without it a new file gets 0644 and an existing one keeps its own.
	Mode    uint32
	HasMode bool
	// Owner and Group are names or numeric ids; empty: a new file gets the
	// writing user's, an existing one keeps its own where the writing
	// user may set it.
	Owner, Group string
	// Mkdir creates the missing parent directories (root's, 0755 under
	// the usual umask).
	Mkdir bool
	// Size and SHA256 (hex) are the content's.
	Size   int64
	SHA256 string
	// Open opens the content, for writing it and for a diff.
	Open func() (io.ReadCloser, error)
	// Secret content is never shown: its diff says only that it differs.
	Secret bool
}

// Bytes is a Want's content held in memory: its size, hash and opener.
func Bytes(b []byte) (size int64, sum string, open func() (io.ReadCloser, error)) {
	h := sha256.Sum256(b)
	return int64(len(b)), hex.EncodeToString(h[:]), func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(string(b))), nil
	}
}

// Kind is what a host has at a path.
type Kind string

const (
	KindFile    Kind = "file"    // a regular file
	KindMissing Kind = "missing" // nothing, in an existing directory
	KindNoDir   Kind = "nodir"   // nothing, and no directory either
	KindLink    Kind = "link"    // a symbolic link (replaced by the file)
	KindDir     Kind = "dir"     // a directory (an error)
	KindOther   Kind = "other"   // a device, a socket, a fifo (replaced)
)

// Found is what a host has at a path.
type Found struct {
	Kind   Kind
	Size   int64
	Mode   uint32
	UID    string
	GID    string
	Owner  string // name, or UNKNOWN
	Group  string
	SHA256 string
}

// What differs between a file and what a host has.
const (
	DiffMissing = "missing"
	DiffType    = "type"
	DiffContent = "content"
	DiffMode    = "mode"
	DiffOwner   = "owner"
	DiffGroup   = "group"
)

// Comparison is one wanted file and what its host has.
type Comparison struct {
	Found Found
	// Differs lists what differs (DiffMissing, DiffType, DiffContent,
	// DiffMode, DiffOwner, DiffGroup); empty: the file is in place.
	Differs []string
}

// Changed says whether anything differs.
func (c Comparison) Changed() bool { return len(c.Differs) > 0 }

// contentSame says whether the host's file has the wanted content.
func (c Comparison) contentSame() bool {
	for _, d := range c.Differs {
		if d == DiffMissing || d == DiffType || d == DiffContent {
			return false
		}
	}
	return true
}

// Differs says what differs between w and what its host has.
func (w *Want) Differs(f Found) []string {
	switch f.Kind {
	case KindMissing, KindNoDir:
		return []string{DiffMissing}
	case KindFile:
	default:
		return []string{DiffType}
	}
	var out []string
	if f.SHA256 != w.SHA256 || f.Size != w.Size {
		out = append(out, DiffContent)
	}
	if w.HasMode && f.Mode != w.Mode {
		out = append(out, DiffMode)
	}
	if w.Owner != "" && !sameID(w.Owner, f.UID, f.Owner) {
		out = append(out, DiffOwner)
	}
	if w.Group != "" && !sameID(w.Group, f.GID, f.Group) {
		out = append(out, DiffGroup)
	}
	return out
}

// sameID says whether a wanted owner (a name or a numeric id) is the
// host's (id, name).
func sameID(want, id, name string) bool {
	if strings.Trim(want, "0123456789") == "" {
		return want == id
	}
	return want == name
}

// Host is where files go: its runner, and whom the scripts run as.
type Host struct {
	Runner     hostexec.Runner
	Become     bool
	BecomeUser string
	// Timeout bounds each script (0: ctx only).
	Timeout time.Duration
	// BeforeStart, when set, is called before the first script starts on
	// the host (the executor records the node's attempt there).
	BeforeStart func() error
}

// ErrHost: a script failed on the host (what it said is in the error).
var ErrHost = errors.New("on the host")

// run runs script with args on the host, its stdin from in (nil: none),
// handing each stdout line to onLine.
func (h *Host) run(ctx context.Context, script string, args []string, in io.Reader, onLine func(string)) error {
	var b strings.Builder
	b.WriteString("set --")
	for _, a := range args {
		b.WriteString(" ")
		b.WriteString(quote(a))
	}
	b.WriteString("\n")
	b.WriteString(script)
	cmd := hostexec.Command{Script: b.String(), Stdin: in, Timeout: h.Timeout, Become: h.Become, BecomeUser: h.BecomeUser, BeforeStart: h.BeforeStart}
	if onLine != nil {
		cmd.OnLine = func(s hostexec.Stream, line string) {
			if s == hostexec.Stdout {
				onLine(line)
			}
		}
	}
	h.BeforeStart = nil // once
	res, err := h.Runner.Run(ctx, cmd)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		said := strings.TrimSpace(res.Stderr)
		if i := strings.LastIndex(said, "gantry: "); i >= 0 {
			said = said[i+len("gantry: "):]
		}
		if said == "" {
			said = "no message"
		}
		return fmt.Errorf("%w: exit status %d: %s", ErrHost, res.ExitCode, said)
	}
	return nil
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// probeScript prints, for each path on its stdin (one a line), "INDEX
// KIND" and for a regular file its size, mode (octal), uid, gid, owner,
// group and SHA-256, then "end".
const probeScript = `i=0
while IFS= read -r p; do
  if [ -L "$p" ]; then echo "$i link"
  elif [ -d "$p" ]; then echo "$i dir"
  elif [ -f "$p" ]; then
    if s=$(stat -c '%s %a %u %g %U %G' -- "$p") && h=$(sha256sum < "$p"); then echo "$i file $s ${h%% *}"
    else echo "gantry: cannot read $p" >&2; exit 3; fi
  elif [ -e "$p" ]; then echo "$i other"
  elif [ -d "$(dirname -- "$p")" ]; then echo "$i missing"
  else echo "$i nodir"
  fi
  i=$((i+1))
done
echo end`

// Compare asks the host, in one script, what it has at each wanted path,
// and says what differs. It writes nothing.
func Compare(ctx context.Context, h *Host, wants []Want) ([]Comparison, error) {
	if len(wants) == 0 {
		return nil, nil
	}
	var paths strings.Builder // on stdin: a command line is bounded
	for i := range wants {
		if strings.ContainsAny(wants[i].Path, "\n\x00") {
			return nil, fmt.Errorf("compare files: path %q holds a line break or a NUL", wants[i].Path)
		}
		paths.WriteString(wants[i].Path)
		paths.WriteString("\n")
	}
	found := make([]Found, len(wants))
	seen := make([]bool, len(wants))
	var perr error
	ended := false
	err := h.run(ctx, probeScript, nil, strings.NewReader(paths.String()), func(line string) {
		if line == "end" {
			ended = true
			return
		}
		i, f, err := parseProbe(line, len(wants))
		if err != nil {
			perr = errors.Join(perr, err)
			return
		}
		found[i], seen[i] = f, true
	})
	if err != nil {
		return nil, fmt.Errorf("compare files: %w", err)
	}
	if perr != nil {
		return nil, fmt.Errorf("compare files: %w", perr)
	}
	out := make([]Comparison, len(wants))
	for i := range wants {
		if !seen[i] || !ended {
			return nil, fmt.Errorf("compare files: %w: the answer about %s did not arrive", ErrHost, wants[i].Path)
		}
		out[i] = Comparison{Found: found[i], Differs: wants[i].Differs(found[i])}
	}
	return out, nil
}

// parseProbe reads one line of probeScript's output.
func parseProbe(line string, n int) (int, Found, error) {
	f := strings.Fields(line)
	bad := fmt.Errorf("%w: an answer that does not parse: %.80q", ErrHost, line)
	if len(f) < 2 {
		return 0, Found{}, bad
	}
	i, err := strconv.Atoi(f[0])
	if err != nil || i < 0 || i >= n {
		return 0, Found{}, bad
	}
	k := Kind(f[1])
	switch k {
	case KindMissing, KindNoDir, KindLink, KindDir, KindOther:
		if len(f) != 2 {
			return 0, Found{}, bad
		}
		return i, Found{Kind: k}, nil
	case KindFile:
	default:
		return 0, Found{}, bad
	}
	if len(f) != 9 {
		return 0, Found{}, bad
	}
	size, err1 := strconv.ParseInt(f[2], 10, 64)
	mode, err2 := strconv.ParseUint(f[3], 8, 32)
	if err1 != nil || err2 != nil || len(f[8]) != 64 {
		return 0, Found{}, bad
	}
	return i, Found{Kind: k, Size: size, Mode: uint32(mode), UID: f[4], GID: f[5], Owner: f[6], Group: f[7], SHA256: f[8]}, nil
}

// writeScript writes stdin to a temporary file beside the path, checks
// its SHA-256, sets its owner and mode and renames it over the path.
// Arguments: path, mode (octal, or ""), owner, group, mkdir (1 or 0),
// SHA-256.
const writeScript = `p=$1 mode=$2 owner=$3 group=$4 mk=$5 want=$6
d=$(dirname -- "$p")
if [ ! -d "$d" ]; then
  if [ "$mk" != 1 ]; then echo "gantry: directory $d does not exist on the host (mkdir: true creates it)" >&2; exit 3; fi
  mkdir -p -- "$d" || { echo "gantry: cannot create directory $d" >&2; exit 3; }
fi
if [ -d "$p" ] && [ ! -L "$p" ]; then echo "gantry: $p is a directory" >&2; exit 3; fi
t=$(mktemp "$d/.gantry-XXXXXXXXXX") || { echo "gantry: cannot create a file in $d" >&2; exit 3; }
trap 'rm -f -- "$t"' EXIT
trap 'exit 129' HUP INT TERM
cat > "$t" || { echo "gantry: cannot write $t" >&2; exit 3; }
got=$(sha256sum < "$t") && got=${got%% *}
if [ "$got" != "$want" ]; then echo "gantry: the content of $p did not arrive whole (sha256 $got, want $want): the file was left as it was" >&2; exit 4; fi
if [ -e "$p" ] && [ ! -L "$p" ]; then chown --reference="$p" -- "$t" 2>/dev/null || :; fi
if [ -n "$owner$group" ]; then
  o=$owner; [ -n "$group" ] && o="$owner:$group"
  chown -- "$o" "$t" || { echo "gantry: cannot give $p the owner $o" >&2; exit 3; }
fi
if [ -n "$mode" ]; then chmod -- "$mode" "$t"
elif [ -e "$p" ] && [ ! -L "$p" ]; then chmod --reference="$p" -- "$t"
else chmod 0644 "$t"; fi || { echo "gantry: cannot set the mode of $p" >&2; exit 3; }
mv -fT -- "$t" "$p" || { echo "gantry: cannot rename $t to $p" >&2; exit 3; }
trap - EXIT`

// attrScript sets an existing file's owner and mode in place (its content
// is right). Arguments: path, mode (octal, or ""), owner, group.
const attrScript = `p=$1 mode=$2 owner=$3 group=$4
if [ -n "$owner$group" ]; then
  o=$owner; [ -n "$group" ] && o="$owner:$group"
  chown -- "$o" "$p" || { echo "gantry: cannot give $p the owner $o" >&2; exit 3; }
fi
if [ -n "$mode" ]; then chmod -- "$mode" "$p" || { echo "gantry: cannot set the mode of $p" >&2; exit 3; }; fi`

// Place puts w in place on the host, given what Compare found (c): the
// whole file when its content differs (or it is missing), else only its
// owner and mode. A file in place is not touched.
func Place(ctx context.Context, h *Host, w *Want, c Comparison) error {
	if !c.Changed() {
		return nil
	}
	if c.Found.Kind == KindDir {
		return fmt.Errorf("%s: %w: it is a directory", w.Path, ErrHost)
	}
	mode := ""
	if w.HasMode {
		mode = strconv.FormatUint(uint64(w.Mode), 8)
	}
	if c.contentSame() {
		if err := h.run(ctx, attrScript, []string{w.Path, mode, w.Owner, w.Group}, nil, nil); err != nil {
			return fmt.Errorf("%s: %w", w.Path, err)
		}
		return nil
	}
	in, err := w.Open()
	if err != nil {
		return fmt.Errorf("%s: %w", w.Path, err)
	}
	defer in.Close()
	mk := "0"
	if w.Mkdir {
		mk = "1"
	}
	if err := h.run(ctx, writeScript, []string{w.Path, mode, w.Owner, w.Group, mk, w.SHA256}, in, nil); err != nil {
		return fmt.Errorf("%s: %w", w.Path, err)
	}
	return nil
}

// readScript prints at most $2 bytes of the file $1 in base64.
const readScript = `head -c "$2" -- "$1" | base64 -w 76 || { echo "gantry: cannot read $1" >&2; exit 3; }`

// Current reads at most max bytes of the file at path on the host.
func Current(ctx context.Context, h *Host, path string, max int64) ([]byte, error) {
	var b strings.Builder
	err := h.run(ctx, readScript, []string{path, strconv.FormatInt(max, 10)}, nil, func(line string) {
		if int64(b.Len()) <= max*4/3+80 {
			b.WriteString(line)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	out, err := base64.StdEncoding.DecodeString(b.String())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w: the content did not arrive whole", path, ErrHost)
	}
	return out, nil
}

// readAll reads at most max bytes of w's content.
func (w *Want) readAll(max int64) ([]byte, error) {
	r, err := w.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(bufio.NewReader(io.LimitReader(r, max)))
}

// Content is a file's content as a Want takes it.
type Content struct {
	Size   int64
	SHA256 string
	Open   func() (io.ReadCloser, error)
}
