package hostfile_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
	"github.com/gantry-dev/gantry/pkg/hostfile"
)

func want(path string, content string) hostfile.Want {
	w := hostfile.Want{Path: path}
	w.Size, w.SHA256, w.Open = hostfile.Bytes([]byte(content))
	return w
}

func local() *hostfile.Host { return &hostfile.Host{Runner: localexec.Local{}, Timeout: time.Minute} }

// compareOne is Compare of one file.
func compareOne(t *testing.T, h *hostfile.Host, w hostfile.Want) hostfile.Comparison {
	t.Helper()
	c, err := hostfile.Compare(context.Background(), h, []hostfile.Want{w})
	if err != nil {
		t.Fatal(err)
	}
	return c[0]
}

// ensure compares w with the host and places it; it returns what
// differed.
func ensure(t *testing.T, h *hostfile.Host, w hostfile.Want) []string {
	t.Helper()
	c := compareOne(t, h, w)
	if err := hostfile.Place(context.Background(), h, &w, c); err != nil {
		t.Fatal(err)
	}
	return c.Differs
}

func mtime(t *testing.T, p string) time.Time {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

// A file is written when missing, left alone (mtime too) when in place,
// rewritten when its content changed by hand, and only chmod-ed when its
// mode alone differs.
func TestPlaceIsIdempotent(t *testing.T) {
	h := local()
	p := filepath.Join(t.TempDir(), "app.conf")
	w := want(p, "port=8080\n")
	w.Mode, w.HasMode = 0o640, true
	if got := ensure(t, h, w); strings.Join(got, ",") != hostfile.DiffMissing {
		t.Fatalf("first placement found %v, want missing", got)
	}
	if b, _ := os.ReadFile(p); string(b) != "port=8080\n" {
		t.Fatalf("content %q", b)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %o, want 640", fi.Mode().Perm())
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if got := ensure(t, h, w); len(got) != 0 {
		t.Fatalf("second placement found %v, want nothing", got)
	}
	if !mtime(t, p).Equal(old) {
		t.Errorf("an unchanged file was touched: mtime %s, want %s", mtime(t, p), old)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ensure(t, h, w); strings.Join(got, ",") != hostfile.DiffMode {
		t.Fatalf("after a chmod found %v, want mode", got)
	}
	if !mtime(t, p).Equal(old) {
		t.Errorf("a mode fix rewrote the file")
	}
	if err := os.WriteFile(p, []byte("port=9999\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if got := ensure(t, h, w); strings.Join(got, ",") != hostfile.DiffContent {
		t.Fatalf("after a hand edit found %v, want content", got)
	}
	if b, _ := os.ReadFile(p); string(b) != "port=8080\n" {
		t.Fatalf("content %q after the fix", b)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".gantry-*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A missing directory fails the placement naming it, unless mkdir; a
// symbolic link is replaced by the file; an empty content is a file.
func TestPlaceDirectoriesAndLinks(t *testing.T) {
	h := local()
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "f")
	w := want(p, "x")
	c := compareOne(t, h, w)
	if c.Found.Kind != hostfile.KindNoDir {
		t.Fatalf("found %s, want nodir", c.Found.Kind)
	}
	err := hostfile.Place(context.Background(), h, &w, c)
	if err == nil || !strings.Contains(err.Error(), "directory "+filepath.Dir(p)+" does not exist on the host (mkdir: true creates it)") {
		t.Fatalf("placing without mkdir: %v", err)
	}
	w.Mkdir = true
	ensure(t, h, w)
	if b, _ := os.ReadFile(p); string(b) != "x" {
		t.Fatalf("content %q", b)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	lw := want(link, "")
	if got := ensure(t, h, lw); strings.Join(got, ",") != hostfile.DiffType {
		t.Fatalf("a link: found %v", got)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("the link was not replaced by an empty file: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "x" {
		t.Errorf("the link's target changed: %q", b)
	}
}

// Content that does not arrive whole (its hash differs) leaves the file
// as it was and says so.
func TestPlaceRefusesDamagedContent(t *testing.T) {
	h := local()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := want(p, "new content")
	w.Open = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("new cont")), nil } // cut short
	c := compareOne(t, h, w)
	err := hostfile.Place(context.Background(), h, &w, c)
	if err == nil || !strings.Contains(err.Error(), "did not arrive whole") {
		t.Fatalf("placing cut content: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("the file is %q, want it left as it was", b)
	}
}

// A check --diff shows a unified diff of a hand edit and the mode change,
// never a secret's content.
func TestDiff(t *testing.T) {
	h := local()
	p := filepath.Join(t.TempDir(), "app.conf")
	if err := os.WriteFile(p, []byte("a\nb\nport=9999\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := want(p, "a\nb\nport=8080\nc\n")
	w.Mode, w.HasMode = 0o600, true
	c := compareOne(t, h, w)
	d, err := hostfile.Diff(context.Background(), h, &w, c, 4096)
	if err != nil {
		t.Fatal(err)
	}
	wantDiff := "--- a" + p + "\n+++ b" + p + "\n@@ -1,4 +1,4 @@\n a\n b\n-port=9999\n+port=8080\n c\nmode 0644 -> 0600\n"
	if d != wantDiff {
		t.Errorf("diff:\n%s\nwant:\n%s", d, wantDiff)
	}
	s := want(p, "s3cr3t-value\n")
	s.Secret = true
	d, err = hostfile.Diff(context.Background(), h, &s, compareOne(t, h, s), 4096)
	if err != nil || d != "content differs (secret: not shown)\n" {
		t.Errorf("a secret's diff: %q, %v", d, err)
	}
	if err := os.WriteFile(p, []byte("s3cr3t-old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, _ = hostfile.Diff(context.Background(), h, &s, compareOne(t, h, s), 4096)
	if strings.Contains(d, "s3cr3t") {
		t.Errorf("a secret's diff shows content: %q", d)
	}
}

// Unified agrees with diff -u (but for its header) on edits of every
// kind, and the diff it makes, applied with patch, gives the new text.
func TestUnifiedMatchesDiffU(t *testing.T) {
	texts := [][2]string{
		{"", "a\nb\n"},
		{"a\nb\n", ""},
		{"a\nb\nc\n", "a\nc\n"},
		{"a\nb\nc\n", "a\nB\nc\nd\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n", "1\n2\nX\n4\n5\n6\n7\n8\n9\n10\n11\nY\n13\n14\n15\n"},
		{"a\nb", "a\nb\n"},
		{"a\nb\n", "a\nc"},
		{"x\ny\nz\nx\ny\nz\n", "y\nz\nx\nq\ny\n"},
	}
	for i, tc := range texts {
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		os.WriteFile(a, []byte(tc[0]), 0o644)
		os.WriteFile(b, []byte(tc[1]), 0o644)
		got, ok := hostfile.Unified(tc[0], tc[1], "a", "b")
		if !ok {
			t.Fatalf("%d: too many edits", i)
		}
		out, _ := exec.Command("diff", "-u", a, b).Output()
		ref := strings.Join(strings.SplitAfter(string(out), "\n")[2:], "")
		body := strings.Join(strings.SplitAfter(got, "\n")[2:], "")
		if countLines(body, '-', '+') != countLines(ref, '-', '+') {
			t.Errorf("%d: %d changed lines, diff -u has %d:\n%s\ndiff -u:\n%s", i, countLines(body, '-', '+'), countLines(ref, '-', '+'), body, ref)
		}
		patched := filepath.Join(dir, "p")
		os.WriteFile(patched, []byte(tc[0]), 0o644)
		cmd := exec.Command("patch", "-s", patched)
		cmd.Stdin = strings.NewReader(got)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%d: patch: %v %s\n%s", i, err, out, got)
		}
		if p, _ := os.ReadFile(patched); string(p) != tc[1] {
			t.Errorf("%d: patched to %q, want %q\n%s", i, p, tc[1], got)
		}
	}
	if _, ok := hostfile.Unified(strings.Repeat("a\n", 3000), strings.Repeat("b\n", 3000), "a", "b"); ok {
		t.Error("6000 edits were diffed")
	}
}

func countLines(s string, marks ...byte) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if len(l) > 0 && bytes.IndexByte(marks, l[0]) >= 0 {
			n++
		}
	}
	return n
}

// Over SSH, through sudo: a 20 MiB binary file arrives whole (streamed on
// stdin), owned by another user with its mode, in a directory only root
// may write in; a second placement changes nothing.
func TestPlaceOverSSHWithBecome(t *testing.T) {
	sshtest.EnsureSudo(t)
	f := sshtest.Start(t, 1, sshtest.Options{})
	login := f.AddUser(t)
	sshtest.Sudoers(t, login+" ALL=(ALL) NOPASSWD: ALL")
	app := sshtest.AddSystemUser(t)
	pool, err := sshexec.NewPool(sshexec.SSHConfig{KeyFile: f.KeyFile, KnownHosts: f.KnownHosts, DefaultUser: f.User})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h := &hostfile.Host{Runner: pool.Runner(f.Hosts[0].Addr, login), Become: true, Timeout: 2 * time.Minute}
	dir, err := os.MkdirTemp("", "hostfile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // root's: the login user cannot write here
		t.Fatal(err)
	}
	big := make([]byte, 20<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(src, big, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(big)
	p := filepath.Join(dir, "sub", "big.bin")
	w := hostfile.Want{Path: p, Mode: 0o640, HasMode: true, Owner: app, Group: app, Mkdir: true, Size: int64(len(big)), SHA256: hex.EncodeToString(sum[:]),
		Open: func() (io.ReadCloser, error) { return os.Open(src) }}
	if got := ensure(t, h, w); strings.Join(got, ",") != hostfile.DiffMissing {
		t.Fatalf("found %v, want missing", got)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the file arrived with %d bytes (%v), want the 20 MiB sent", len(got), err)
	}
	fi, _ := os.Stat(p)
	u, _ := user.LookupId(strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)))
	if fi.Mode().Perm() != 0o640 || u == nil || u.Username != app {
		t.Errorf("mode %o owner %v, want 640 %s", fi.Mode().Perm(), u, app)
	}
	before := mtime(t, p)
	if got := ensure(t, h, w); len(got) != 0 {
		t.Errorf("second placement found %v", got)
	}
	if !mtime(t, p).Equal(before) {
		t.Error("the unchanged file was rewritten")
	}
	// Without become the login user cannot read its own placement back.
	plain := &hostfile.Host{Runner: pool.Runner(f.Hosts[0].Addr, login), Timeout: time.Minute}
	if _, err := hostfile.Compare(context.Background(), plain, []hostfile.Want{w}); err == nil || !errors.Is(err, hostfile.ErrHost) || !strings.Contains(err.Error(), "cannot read "+p) {
		t.Errorf("comparing an unreadable file: %v", err)
	}
}
