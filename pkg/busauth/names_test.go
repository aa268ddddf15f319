package busauth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
)

// The names file names every identity's public key, and reads back as
// the planner takes it; a file that is not one is an error naming why.
func TestNamesFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	path, err := k.WriteNames()
	if err != nil {
		t.Fatal(err)
	}
	names, err := ReadNames(path)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := k.Public(events.Operator)
	if names[pub] != "operator" || len(names) != len(Identities()) {
		t.Fatalf("names %v", names)
	}
	b, _ := os.ReadFile(path)
	for _, id := range Identities() {
		if seed, _ := os.ReadFile(k.SeedFile(id)); strings.Contains(string(b), strings.TrimSpace(string(seed))) {
			t.Fatalf("the names file holds %s's seed:\n%s", id, b)
		}
	}
	for content, want := range map[string]string{
		`[]`:                  "not a JSON object",
		`{"UNOTAKEY": "x"}`:   `"UNOTAKEY" is not a user's public nkey`,
		`{"` + pub + `": ""}`: "has an empty name",
	} {
		bad := filepath.Join(t.TempDir(), "names.json")
		os.WriteFile(bad, []byte(content), 0o644)
		if _, err := ReadNames(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", content, err, want)
		}
	}
}
