package hostfile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Errors of Dir.Content, wrapped with the file's name.
var (
	ErrNoDir      = errors.New("no --files-dir on this worker")
	ErrNotFound   = errors.New("not found")
	ErrEscapes    = errors.New("leaves the --files-dir")
	ErrUnreadable = errors.New("cannot be read")
)

// Dir is a worker's --files-dir: the files nodes name as source, read
// only from within it (a name with '..', an absolute one, or a symbolic
// link that points out of it is refused). Their content is read when a
// node places them, streamed, and never travels on the bus.
type Dir struct {
	path string
}

// OpenDir checks that path is a directory that can be read. An empty
// path is a worker without one: every Content fails with ErrNoDir.
func OpenDir(path string) (*Dir, error) {
	if path == "" {
		return &Dir{}, nil
	}
	r, err := os.OpenRoot(path)
	if err != nil {
		return nil, fmt.Errorf("files directory: %w", err)
	}
	defer r.Close()
	if _, err := r.Stat("."); err != nil {
		return nil, fmt.Errorf("files directory %s: %w", path, err)
	}
	return &Dir{path: path}, nil
}

// Path is the directory ("" when none).
func (d *Dir) Path() string { return d.path }

// Content is the file name under the directory: its size and SHA-256
// (read once, streamed) and a way to open it again.
func (d *Dir) Content(name string) (Content, error) {
	if p := dag.SourceProblem(name); p != "" || name == "" {
		return Content{}, fmt.Errorf("source %q %w: %s", name, ErrEscapes, p)
	}
	if d.path == "" {
		return Content{}, fmt.Errorf("source %q: %w: start it with --files-dir DIR holding %s", name, ErrNoDir, name)
	}
	open := func() (io.ReadCloser, error) { return d.open(name) }
	f, err := open()
	if err != nil {
		return Content{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Content{}, fmt.Errorf("source %q %w: %w", name, ErrUnreadable, err)
	}
	return Content{Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Open: open}, nil
}

// open opens name within the directory: os.Root refuses a way out of it,
// by '..' or by a symbolic link.
func (d *Dir) open(name string) (io.ReadCloser, error) {
	r, err := os.OpenRoot(d.path)
	if err != nil {
		return nil, fmt.Errorf("source %q %w: files directory %s: %w", name, ErrUnreadable, d.path, err)
	}
	defer r.Close()
	f, err := r.Open(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("source %q: %w in %s", name, ErrNotFound, d.path)
	case err != nil && isEscape(err):
		return nil, fmt.Errorf("source %q %w (a symbolic link out of %s)", name, ErrEscapes, d.path)
	case err != nil:
		return nil, fmt.Errorf("source %q %w: %w", name, ErrUnreadable, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("source %q %w: %s/%s is not a regular file", name, ErrUnreadable, d.path, name)
	}
	return f, nil
}

// isEscape says whether err is os.Root's refusal of a path out of it.
func isEscape(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent"
}

// RegisterFlag adds --files-dir to a worker's flags (its variable is
// GANTRY_FILES_DIR).
func RegisterFlag(fs *flag.FlagSet, dst *string) {
	fs.StringVar(dst, "files-dir", "", "directory holding the files nodes place with files: [{source: NAME}] ($GANTRY_FILES_DIR; default none: such nodes fail)")
}
