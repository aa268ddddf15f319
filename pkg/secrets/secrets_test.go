package secrets_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/secrets"
	"github.com/gantry-dev/gantry/pkg/secrets/secretstest"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDirLookup(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	write(t, outside, "not-yours")
	write(t, filepath.Join(dir, "db_pass"), "s3cr3t\n")
	write(t, filepath.Join(dir, "crlf"), "v\r\n")
	write(t, filepath.Join(dir, "multi"), "line1\nline2\n\n")
	write(t, filepath.Join(dir, "empty"), "\n")
	write(t, filepath.Join(dir, "nul"), "a\x00b")
	write(t, filepath.Join(dir, "big"), strings.Repeat("x", secrets.MaxSize+1))
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	// Kubernetes: name -> ..data/name, ..data -> a timestamped directory.
	if err := os.MkdirAll(filepath.Join(dir, "..2026_11_23", ""), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "..2026_11_23", "k8s"), "from-k8s")
	if err := os.Symlink("..2026_11_23", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/k8s", filepath.Join(dir, "k8s")); err != nil {
		t.Fatal(err)
	}
	d, err := secrets.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		err        error
		msg        string
	}{
		{name: "db_pass", want: "s3cr3t"},
		{name: "crlf", want: "v"},
		{name: "multi", want: "line1\nline2\n"},
		{name: "k8s", want: "from-k8s"},
		{name: "missing", err: secrets.ErrNotFound, msg: `secret "missing": not found in ` + dir},
		{name: "empty", err: secrets.ErrBadValue, msg: "the file is empty"},
		{name: "nul", err: secrets.ErrBadValue, msg: "NUL byte"},
		{name: "big", err: secrets.ErrBadValue, msg: "larger than 65536 bytes"},
		{name: "adir", err: secrets.ErrUnreadable, msg: "not a regular file"},
		{name: "escape", err: secrets.ErrUnreadable, msg: `secret "escape" cannot be read`},
		{name: "../outside", err: secrets.ErrBadName, msg: `secret "../outside": not a secret name (letters`},
		{name: "a/b", err: secrets.ErrBadName, msg: `secret "a/b": not a secret name`},
		{name: "..", err: secrets.ErrBadName},
	} {
		got, err := d.Lookup(tc.name)
		switch {
		case tc.err == nil && (err != nil || got != tc.want):
			t.Errorf("%s: %q %v, want %q", tc.name, got, err, tc.want)
		case tc.err != nil && (!errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("%s: error %v, want %v containing %q", tc.name, err, tc.err, tc.msg)
		case tc.err != nil && strings.Contains(err.Error(), "not-yours"):
			t.Errorf("%s: error shows a value: %v", tc.name, err)
		}
	}
}

func TestNoDir(t *testing.T) {
	d, err := secrets.Open("")
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Lookup("db_pass")
	if !errors.Is(err, secrets.ErrNoDir) || !strings.Contains(err.Error(), "--secrets-dir") {
		t.Errorf("error %v", err)
	}
	if _, err := secrets.Open(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Errorf("a missing directory opened")
	}
}

func TestSplit(t *testing.T) {
	m := secretstest.Map{"db": "pw", "tok": "t0k"}
	plain, sec, err := secrets.Split(m, map[string]dag.EnvValue{"A": dag.Text("1"), "DB": dag.SecretRef("db"), "T": dag.SecretRef("tok")})
	if err != nil || plain["A"] != "1" || len(plain) != 1 || sec["DB"] != "pw" || sec["T"] != "t0k" || len(sec) != 2 {
		t.Errorf("split: %v %v %v", plain, sec, err)
	}
	_, _, err = secrets.Split(m, map[string]dag.EnvValue{"X": dag.SecretRef("x1"), "Y": dag.SecretRef("y1"), "A": dag.Text("1")})
	if !errors.Is(err, secrets.ErrNotFound) || !strings.Contains(err.Error(), `"x1"`) || !strings.Contains(err.Error(), `"y1"`) {
		t.Errorf("every missing secret is named: %v", err)
	}
}
