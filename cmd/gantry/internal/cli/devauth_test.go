package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nobody is the uid of "another local user" in these tests: root makes a
// file and hands it to nobody, as that user would have made it.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root, to make a file another user owns")
	}
}

// captureStderr runs f and returns what it wrote to os.Stderr.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	tmp, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = tmp
	defer func() { os.Stderr = old }()
	f()
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(tmp)
	tmp.Close()
	return string(b)
}

// TestDevNoteInASharedDirectory: with no XDG_RUNTIME_DIR the note of
// `gantry dev` is under the shared temporary directory, where another
// local user may have made the directory or the note first. Writing the
// note never goes through a symlink nor into a directory someone else
// owns, and reading it never trusts a symlink or someone else's file.
func TestDevNoteInASharedDirectory(t *testing.T) {
	const port = "4999"
	type env struct {
		dir, note string // the note's directory and path
		outside   string // a file of the victim's, outside the directory
		seed      string // an operator seed file
		other     string // a directory someone else controls
	}
	for _, tc := range []struct {
		name  string
		xdg   bool // XDG_RUNTIME_DIR set (else TMPDIR)
		root  bool // the case needs root
		setup func(t *testing.T, e env)
		// write: writeDevNote's error should contain wantErr ("" : none);
		// read: devOperatorKey should find the seed only when wantKey.
		write   bool
		wantErr string
		wantKey bool
		check   func(t *testing.T, e env)
	}{
		{
			name:  "missing dir is made 0700",
			write: true,
			check: func(t *testing.T, e env) { wantMode(t, e.dir, 0o700) },
		},
		{
			name: "our 0777 dir is tightened to 0700",
			setup: func(t *testing.T, e env) {
				mustMkdir(t, e.dir)
				must(t, os.Chmod(e.dir, 0o777))
			},
			write: true,
			check: func(t *testing.T, e env) { wantMode(t, e.dir, 0o700) },
		},
		{
			name:    "symlink at the dir path is refused",
			setup:   func(t *testing.T, e env) { must(t, os.Symlink(e.other, e.dir)) },
			write:   true,
			wantErr: "is a symlink",
			check: func(t *testing.T, e env) {
				if ents, _ := os.ReadDir(e.other); len(ents) != 0 {
					t.Errorf("wrote through the symlink into %s: %v", e.other, ents)
				}
			},
		},
		{
			name: "dir owned by another user is refused",
			root: true,
			setup: func(t *testing.T, e env) {
				mustMkdir(t, e.dir)
				must(t, os.Chmod(e.dir, 0o777))
				must(t, os.Chown(e.dir, nobody, nobody))
			},
			write:   true,
			wantErr: "owned by uid 65534, not you",
			check: func(t *testing.T, e env) {
				if _, err := os.Lstat(e.note); err == nil {
					t.Errorf("wrote %s in a directory uid %d owns", e.note, nobody)
				}
			},
		},
		{
			name: "symlink at the note path is not followed",
			setup: func(t *testing.T, e env) {
				mustMkdir(t, e.dir)
				must(t, os.Symlink(e.outside, e.note))
			},
			write: true,
			check: func(t *testing.T, e env) {
				wantContent(t, e.outside, "precious\n")
				wantRegular(t, e.note)
			},
		},
		{
			name: "symlink at the note path is not followed (XDG_RUNTIME_DIR)",
			xdg:  true,
			setup: func(t *testing.T, e env) {
				mustMkdir(t, e.dir)
				must(t, os.Symlink(e.outside, e.note))
			},
			write: true,
			check: func(t *testing.T, e env) {
				wantContent(t, e.outside, "precious\n")
				wantRegular(t, e.note)
			},
		},
		{
			name: "our own note is read",
			setup: func(t *testing.T, e env) {
				mustMkdir(t, e.dir)
				must(t, os.WriteFile(e.note, []byte(e.seed+"\n"), 0o600))
			},
			wantKey: true,
		},
		{
			name: "a note that is a symlink is not read",
			setup: func(t *testing.T, e env) {
				mustMkdir(t, e.dir)
				target := filepath.Join(e.other, "note")
				must(t, os.WriteFile(target, []byte(e.seed+"\n"), 0o600))
				must(t, os.Symlink(target, e.note))
			},
			wantErr: "is a symlink",
		},
		{
			name: "a note that is a symlink is not read (XDG_RUNTIME_DIR)",
			xdg:  true,
			setup: func(t *testing.T, e env) {
				mustMkdir(t, e.dir)
				target := filepath.Join(e.other, "note")
				must(t, os.WriteFile(target, []byte(e.seed+"\n"), 0o600))
				must(t, os.Symlink(target, e.note))
			},
			wantErr: "is a symlink",
		},
		{
			name: "a note another user owns is not read",
			root: true,
			setup: func(t *testing.T, e env) {
				mustMkdir(t, e.dir)
				must(t, os.WriteFile(e.note, []byte(e.seed+"\n"), 0o600))
				must(t, os.Chown(e.note, nobody, nobody))
			},
			wantErr: "owned by uid 65534, not you",
		},
		{
			name: "a note in a dir another user owns is not read",
			root: true,
			setup: func(t *testing.T, e env) {
				mustMkdir(t, e.dir)
				must(t, os.WriteFile(e.note, []byte(e.seed+"\n"), 0o644))
				must(t, os.Chown(e.note, nobody, nobody))
				must(t, os.Chown(e.dir, nobody, nobody))
			},
			wantErr: "owned by uid 65534, not you",
		},
		{
			name: "a note in a symlinked dir is not read",
			setup: func(t *testing.T, e env) {
				must(t, os.WriteFile(filepath.Join(e.other, filepath.Base(e.note)), []byte(e.seed+"\n"), 0o600))
				must(t, os.Symlink(e.other, e.dir))
			},
			wantErr: "is a symlink",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				needRoot(t)
			}
			base := t.TempDir()
			var e env
			if tc.xdg {
				t.Setenv("XDG_RUNTIME_DIR", base)
				e.dir = filepath.Join(base, "gantry")
			} else {
				t.Setenv("XDG_RUNTIME_DIR", "")
				t.Setenv("TMPDIR", base)
				e.dir = filepath.Join(base, "gantry-"+uidString())
			}
			e.note = filepath.Join(e.dir, "dev-"+port+".nk-path")
			if got := devNotePath(port); got != e.note {
				t.Fatalf("devNotePath = %s, want %s", got, e.note)
			}
			private := t.TempDir()
			e.outside = filepath.Join(private, "outside")
			must(t, os.WriteFile(e.outside, []byte("precious\n"), 0o600))
			e.seed = filepath.Join(private, "operator.nk")
			must(t, os.WriteFile(e.seed, []byte("SU...\n"), 0o600))
			e.other = t.TempDir()
			must(t, os.Chmod(e.other, 0o777))
			if tc.setup != nil {
				tc.setup(t, e)
			}

			if tc.write {
				remove, err := writeDevNote(port, e.seed)
				switch {
				case tc.wantErr == "" && err != nil:
					t.Fatalf("writeDevNote: %v", err)
				case tc.wantErr != "" && err == nil:
					t.Errorf("writeDevNote: no error, want one containing %q", tc.wantErr)
				case tc.wantErr != "" && !(strings.Contains(err.Error(), tc.wantErr) && strings.Contains(err.Error(), e.dir)):
					t.Errorf("writeDevNote: %v; want it to name %s and say %q", err, e.dir, tc.wantErr)
				}
				if err == nil {
					wantContent(t, e.note, e.seed+"\n")
					wantMode(t, e.note, 0o600)
					defer remove()
				}
			} else {
				var got string
				warn := captureStderr(t, func() { got = devOperatorKey("nats://127.0.0.1:" + port) })
				if tc.wantKey && got != e.seed {
					t.Errorf("devOperatorKey = %q, want %q", got, e.seed)
				}
				if !tc.wantKey && got != "" {
					t.Errorf("devOperatorKey = %q, want none", got)
				}
				if tc.wantErr != "" && !strings.Contains(warn, tc.wantErr) {
					t.Errorf("warning %q does not say %q", warn, tc.wantErr)
				}
				if tc.wantErr == "" && warn != "" {
					t.Errorf("unexpected warning %q", warn)
				}
			}
			if tc.check != nil {
				tc.check(t, e)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	must(t, os.Mkdir(dir, 0o700))
}

func wantMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %#o, want %#o", path, got, want)
	}
}

func wantContent(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("%s holds %q, want %q", path, b, want)
	}
}

func wantRegular(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() {
		t.Errorf("%s: %v, want a regular file", path, fi.Mode())
	}
}
