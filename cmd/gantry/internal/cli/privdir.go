package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// gantry dev keeps a note and, with no home directory, its data under the
// shared temporary directory, where any local user may have made the path
// first. These helpers use such a directory only when it is this user's
// own: a real directory (never a symlink, never followed), owned by this
// uid, that no one else may read or write.

// privateDir makes dir, mode 0700, when it is missing (and its parents,
// 0700). When it is there it must be a directory, not a symlink, owned by
// this user; one others may read or write is tightened to 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return openPrivateDir(dir, true)
}

// checkPrivateDir is privateDir for a reader: it makes and changes
// nothing, and refuses a directory others may read or write.
func checkPrivateDir(dir string) error { return openPrivateDir(dir, false) }

func openPrivateDir(dir string, tighten bool) error {
	// O_NOFOLLOW: a symlink at dir fails to open (ELOOP) rather than being
	// followed; the checks and the chmod are on what was opened.
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return pathProblem(dir, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := ownedByMe(dir, fi); err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if !tighten {
			return fmt.Errorf("%s is open to other users (mode %#o, want 0700)", dir, perm)
		}
		if err := f.Chmod(0o700); err != nil {
			return fmt.Errorf("%s is open to other users (mode %#o) and could not be made 0700: %w", dir, perm, err)
		}
	}
	return nil
}

// pathProblem says what is wrong with a path that would not open with
// O_NOFOLLOW (and O_DIRECTORY).
func pathProblem(path string, err error) error {
	if fi, lerr := os.Lstat(path); lerr == nil {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symlink: refusing to follow it", path)
		case errors.Is(err, syscall.ENOTDIR):
			return fmt.Errorf("%s is not a directory", path)
		}
	}
	return err
}

// ownedByMe refuses what another uid owns.
func ownedByMe(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot tell its owner", path)
	}
	if me := os.Getuid(); int(st.Uid) != me {
		return fmt.Errorf("%s is owned by uid %d, not you (uid %d)", path, st.Uid, me)
	}
	return nil
}

// writePrivateFile replaces path, in a directory privateDir accepted, with
// data, mode 0600, atomically: a new file (O_CREATE|O_EXCL, which neither
// follows nor reuses anything already there) renamed over path. A symlink
// at path is replaced, never followed.
func writePrivateFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// readPrivateFile reads a small file of this user's, never through a
// symlink: a regular file, owned by this uid.
func readPrivateFile(path string, max int64) ([]byte, error) {
	// O_NONBLOCK: a FIFO put there does not hang the open.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symlink: refusing to follow it", path)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%v)", path, fi.Mode().Type())
	}
	if err := ownedByMe(path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is over %d bytes", path, max)
	}
	return b, nil
}
