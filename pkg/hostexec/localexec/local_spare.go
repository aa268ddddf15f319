package localexec

import (
	"errors"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Spare files. A local attempt needs four new files (.run, .out, .err, .id)
// before its command may start, and a new file costs the filesystem an
// inode: on the benchmark machine's ext4 0.1-0.9 ms each, depending on the
// directory, against 15-20 µs to give an existing inode a name. So the
// worker makes the inodes ahead of need, in the background: unnamed files
// (O_TMPFILE) in the attempts directory, held open, and links one in
// (linkat through /proc/self/fd) when an attempt needs a file. linkat
// fails when the name exists, as the exclusive create it replaces does, so
// the claim stays atomic. An unnamed file leaves nothing behind: it is
// gone when the worker closes it or dies, and it is in no directory
// listing. Where that cannot be done (a filesystem without O_TMPFILE, no
// /proc), files are created as before.

// sparesPerDir is how many spare files the worker keeps per attempts
// directory: three attempts' worth.
const sparesPerDir = 12

// spareDirs bounds the attempts directories the worker keeps spares for
// (a worker has one; commands may name others).
const spareDirs = 4

// spareDir is the spare files of one attempts directory.
type spareDir struct {
	mu      sync.Mutex
	files   []*os.File // unnamed files, ready
	filling bool
	off     bool // cannot be done here: files are created
}

// spareSet is a Local runner's spare files, by attempts directory.
type spareSet struct {
	mu    sync.Mutex
	dirs  map[string]*spareDir
	order []string // oldest first
}

func (s *spareSet) dirOf(base string) *spareDir {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dirs == nil {
		s.dirs = map[string]*spareDir{}
	}
	d := s.dirs[base]
	if d == nil {
		if len(s.order) >= spareDirs { // the oldest gives its files up
			old := s.order[0]
			s.order = s.order[1:]
			s.dirs[old].stop()
			delete(s.dirs, old)
		}
		d = &spareDir{}
		s.dirs[base] = d
		s.order = append(s.order, base)
	}
	return d
}

// place gives a spare file of base the name dst, never replacing
// anything. It returns os.ErrExist when dst exists, and false when it
// placed nothing for another reason (no spare ready, or it cannot be done
// here): then the caller creates dst.
func (s *spareSet) place(base, dst string) (bool, error) {
	d := s.dirOf(base)
	d.mu.Lock()
	if d.off {
		d.mu.Unlock()
		return false, nil
	}
	var f *os.File
	if n := len(d.files); n > 0 {
		f, d.files = d.files[n-1], d.files[:n-1]
	}
	d.mu.Unlock()
	if f == nil {
		return false, nil
	}
	err := linkSpare(f, dst)
	switch {
	case err == nil:
		f.Close()
		return true, nil
	case errors.Is(err, unix.EEXIST):
		d.give(f) // still a spare
		return true, os.ErrExist
	}
	f.Close()
	if _, serr := os.Stat(filepath.Dir(dst)); serr != nil {
		return false, nil // the directory is gone (it is made again): spares go on
	}
	d.stop() // no /proc, another filesystem, no space: files are created
	return false, nil
}

func (d *spareDir) give(f *os.File) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off {
		f.Close()
		return
	}
	d.files = append(d.files, f)
}

// stop gives up spares here (they cannot be linked in, or the directory
// was evicted) and closes those made.
func (d *spareDir) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.off = true
	for _, f := range d.files {
		f.Close()
	}
	d.files = nil
}

// refill starts making base's spare files in the background, unless that
// is under way.
func (s *spareSet) refill(base string) {
	d := s.dirOf(base)
	d.mu.Lock()
	fill := !d.filling && !d.off && len(d.files) < sparesPerDir
	if fill {
		d.filling = true
	}
	d.mu.Unlock()
	if fill {
		go d.fill(base)
	}
}

// fill makes unnamed files in base until there are sparesPerDir.
func (d *spareDir) fill(base string) {
	defer func() {
		d.mu.Lock()
		d.filling = false
		d.mu.Unlock()
	}()
	for {
		d.mu.Lock()
		n, off := len(d.files), d.off
		d.mu.Unlock()
		if n >= sparesPerDir || off {
			return
		}
		f, err := openSpare(base)
		switch {
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EINVAL):
			d.stop() // no O_TMPFILE on this filesystem
			return
		case err != nil:
			return // the directory is gone, or full: the next attempt tries again
		}
		d.give(f)
	}
}
