package busauth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

// NamesFile is the file, beside the seeds, that names each identity's
// public nkey: what the planner gives a requester authenticated by an
// nkey alone (no JWT name), so that "submitted by" says "operator", not
// the key. It holds public keys only.
const NamesFile = "names.json"

// WriteNames writes dir/names.json, each identity's public key and name,
// and returns its path.
func (k *Keys) WriteNames() (string, error) {
	b, err := json.MarshalIndent(k.Names(), "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(k.Dir, NamesFile)
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// ReadNames reads a names file: a JSON object of public user nkeys and
// the names to show for them. A key that is not a user's public nkey, or
// a name that is empty, is an error naming it.
func ReadNames(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity names: %w", err)
	}
	var names map[string]string
	if err := json.Unmarshal(b, &names); err != nil {
		return nil, fmt.Errorf("identity names %s: not a JSON object of public nkeys and names: %w", path, err)
	}
	for key, name := range names {
		if !nkeys.IsValidPublicUserKey(key) {
			return nil, fmt.Errorf("identity names %s: %q is not a user's public nkey", path, key)
		}
		if name == "" {
			return nil, fmt.Errorf("identity names %s: %s has an empty name", path, key)
		}
	}
	return names, nil
}
