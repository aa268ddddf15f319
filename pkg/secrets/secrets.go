// Package secrets resolves the secrets a command's environment names
// ({secret: NAME}) on the worker that runs the command: one file per
// secret in a directory (as Docker, Compose and Kubernetes mount them),
// read at run time. Values never leave the worker except to the command
// itself; errors name the secret, never its value.
package secrets

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Errors of a lookup, wrapped with the secret's name.
var (
	ErrNoDir      = errors.New("no secrets directory")
	ErrNotFound   = errors.New("not found")
	ErrUnreadable = errors.New("cannot be read")
	ErrBadName    = errors.New("not a secret name")
	ErrBadValue   = errors.New("not usable as a value")
)

// MaxSize is the largest secret a file may hold.
const MaxSize = 64 << 10

// Dir is a secrets directory: the file NAME holds the secret NAME, with
// one trailing newline (\n or \r\n) removed, as `echo value > NAME` leaves
// it. Symbolic links are followed only within the directory (Kubernetes
// mounts secrets as links into a ..data directory beside them).
type Dir struct {
	path string
}

// Open checks that path is a directory that can be read. An empty path is
// a worker without secrets: every lookup fails with ErrNoDir.
func Open(path string) (*Dir, error) {
	if path == "" {
		return &Dir{}, nil
	}
	r, err := os.OpenRoot(path)
	if err != nil {
		return nil, fmt.Errorf("secrets directory: %w", err)
	}
	defer r.Close()
	if _, err := r.Stat("."); err != nil {
		return nil, fmt.Errorf("secrets directory %s: %w", path, err)
	}
	return &Dir{path: path}, nil
}

// Path is the directory ("" when none).
func (d *Dir) Path() string { return d.path }

// Lookup reads the secret named name.
func (d *Dir) Lookup(name string) (string, error) {
	if !dag.IsSecretName(name) {
		return "", fmt.Errorf("secret %q: %w (%s)", name, ErrBadName, dag.SecretNameRule)
	}
	if d.path == "" {
		return "", fmt.Errorf("secret %q: %w on this worker: start it with --secrets-dir DIR holding a file named %s", name, ErrNoDir, name)
	}
	b, err := d.read(name)
	if err != nil {
		return "", err
	}
	return value(name, b)
}

// Bytes reads the secret named name as its file holds it, byte for byte
// (a trailing newline kept, any byte allowed): the content of a secret
// file a node places.
func (d *Dir) Bytes(name string) ([]byte, error) {
	if !dag.IsSecretName(name) {
		return nil, fmt.Errorf("secret %q: %w (%s)", name, ErrBadName, dag.SecretNameRule)
	}
	if d.path == "" {
		return nil, fmt.Errorf("secret %q: %w on this worker: start it with --secrets-dir DIR holding a file named %s", name, ErrNoDir, name)
	}
	return d.read(name)
}

func (d *Dir) read(name string) ([]byte, error) {
	r, err := os.OpenRoot(d.path)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w: secrets directory %s: %w", name, ErrUnreadable, d.path, unwrapPath(err))
	}
	defer r.Close()
	f, err := r.Open(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("secret %q: %w in %s", name, ErrNotFound, d.path)
	case err != nil:
		return nil, fmt.Errorf("secret %q %w: %w", name, ErrUnreadable, unwrapPath(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("secret %q %w: %s/%s is not a regular file", name, ErrUnreadable, d.path, name)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("secret %q %w: %w", name, ErrUnreadable, unwrapPath(err))
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("secret %q is %w: larger than %d bytes", name, ErrBadValue, MaxSize)
	}
	return b, nil
}

// value is the secret a file holds: without one trailing newline, not
// empty (there would be nothing to mask) and without NUL bytes (no
// environment variable can hold one).
func value(name string, b []byte) (string, error) {
	s := string(b)
	if t, ok := strings.CutSuffix(s, "\n"); ok {
		s = strings.TrimSuffix(t, "\r")
	}
	switch {
	case s == "":
		return "", fmt.Errorf("secret %q is %w: the file is empty", name, ErrBadValue)
	case strings.IndexByte(s, 0) >= 0:
		return "", fmt.Errorf("secret %q is %w: it holds a NUL byte", name, ErrBadValue)
	}
	return s, nil
}

// unwrapPath keeps an error's reason ("permission denied", "path escapes
// from parent") without repeating its operation and path.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s %s: %w", pe.Op, pe.Path, pe.Err)
	}
	return err
}

// Lookuper finds a secret's value by name (a Dir; a map in tests).
type Lookuper interface {
	Lookup(name string) (string, error)
}

// Split resolves an environment: the plain values, and the values of its
// secrets (by variable name), which must be kept out of argv and masked
// in output. Every secret is looked up, and all failures are returned
// together.
func Split(l Lookuper, env map[string]dag.EnvValue) (plain, secret map[string]string, err error) {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		if !v.IsSecret() {
			if plain == nil {
				plain = make(map[string]string, len(env))
			}
			plain[k] = v.Text
			continue
		}
		s, err := l.Lookup(v.Secret)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if secret == nil {
			secret = make(map[string]string)
		}
		secret[k] = s
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return plain, secret, nil
}

// RegisterFlag adds --secrets-dir to a worker's flags (its variable is
// GANTRY_SECRETS_DIR).
func RegisterFlag(fs *flag.FlagSet, dst *string) {
	fs.StringVar(dst, "secrets-dir", "", "directory with one file per secret that commands name as {secret: NAME} ($GANTRY_SECRETS_DIR; default none: such commands fail)")
}
