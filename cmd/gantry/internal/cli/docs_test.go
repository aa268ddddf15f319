package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsUpToDate: docs/cli (the reference and the man pages) is what
// the commands generate now; make docs writes it again.
func TestDocsUpToDate(t *testing.T) {
	for _, kv := range os.Environ() {
		for _, p := range DocsEnvPrefixes {
			if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, p) {
				t.Setenv(k, "")
			}
		}
	}
	dir := t.TempDir()
	if err := WriteDocs(dir); err != nil {
		t.Fatal(err)
	}
	committed := "../../../../docs/cli"
	want, got := readTree(t, dir), readTree(t, committed)
	for name, text := range want {
		switch g, ok := got[name]; {
		case !ok:
			t.Errorf("docs/cli/%s is missing: run make docs", name)
		case g != text:
			t.Errorf("docs/cli/%s is out of date: run make docs", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/cli/%s is of no command any more: run make docs", name)
		}
	}
	if !strings.Contains(want["gantry_help_exit-codes.md"], "130  interrupted") || !strings.Contains(want["man/gantry-status.1"], "unique start") {
		t.Errorf("the reference lacks the exit codes or the man page of status")
	}
}

// readTree is every file under dir by its path in it.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
