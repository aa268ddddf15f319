// Package secretstest holds secrets in memory for tests, in place of a
// worker's secrets directory (secrets.Dir). Only tests import it: no
// service binary links it.
package secretstest

import (
	"fmt"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/secrets"
)

// Map is secrets held in memory, by name.
type Map map[string]string

// Lookup returns the named secret: secrets.ErrBadName for a name that
// is not a secret's, secrets.ErrNotFound for one the map lacks, as
// secrets.Dir.Lookup.
func (m Map) Lookup(name string) (string, error) {
	if !dag.IsSecretName(name) {
		return "", fmt.Errorf("secret %q: %w (%s)", name, secrets.ErrBadName, dag.SecretNameRule)
	}
	s, ok := m[name]
	if !ok {
		return "", fmt.Errorf("secret %q: %w", name, secrets.ErrNotFound)
	}
	return s, nil
}

// Bytes is the named secret as bytes (Lookup's value), as
// secrets.Dir.Bytes reads a secret file's content.
func (m Map) Bytes(name string) ([]byte, error) {
	s, err := m.Lookup(name)
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}
