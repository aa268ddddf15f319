package hostexec

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Spare files. A local attempt needs three new files (.run, .out, .err)
// before its command may start, and a new file costs the filesystem an
// inode: on the benchmark machine's ext4 0.1-0.9 ms each, depending on the
// directory, against 15-20 µs to rename a file into it. So the worker
// makes empty files ahead of need in <attempts>/.spare and renames them
// into place. The run file is renamed with renameat2(RENAME_NOREPLACE),
// which fails when the name exists, as the exclusive create it replaces
// does: the claim stays atomic. Where a rename cannot be done (a
// filesystem without RENAME_NOREPLACE, a spare swept meanwhile), the file
// is created as before.
//
// An attempt that takes spares makes new ones while its command runs, and
// waits for them before it returns (nothing of it writes in the attempts
// directory after that): a chain of short commands pays the difference
// when making them takes longer than the command.

// sparesPerDir is how many spare files the worker keeps per attempts
// directory: three attempts' worth.
const sparesPerDir = 9

// spareDir is the spare files of one attempts directory.
type spareDir struct {
	mu      sync.Mutex
	names   []string // spare files ready, under <base>/.spare
	filling bool
	off     bool // renames cannot be done here: files are created
}

var spares struct {
	mu   sync.Mutex
	dirs map[string]*spareDir
}

func spareDirOf(base string) *spareDir {
	spares.mu.Lock()
	defer spares.mu.Unlock()
	if spares.dirs == nil {
		spares.dirs = map[string]*spareDir{}
	}
	d := spares.dirs[base]
	if d == nil {
		d = &spareDir{}
		spares.dirs[base] = d
	}
	return d
}

// placeSpare renames a spare file of base to dst without replacing
// anything. It returns fs.ErrExist when dst
// exists, and false when it placed nothing for another reason (no spare,
// or renames cannot be done here): then the caller creates dst.
func placeSpare(base, dst string) (bool, error) {
	d := spareDirOf(base)
	d.mu.Lock()
	if d.off {
		d.mu.Unlock()
		return false, nil
	}
	var name string
	if n := len(d.names); n > 0 {
		name, d.names = d.names[n-1], d.names[:n-1]
	}
	d.mu.Unlock()
	if name == "" {
		return false, nil
	}
	err := unix.Renameat2(unix.AT_FDCWD, name, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EEXIST):
		d.give(name) // still a spare
		return true, os.ErrExist
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EXDEV):
		d.mu.Lock()
		d.off = true
		d.mu.Unlock()
	}
	return false, nil
}

func (d *spareDir) give(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names = append(d.names, name)
}

// refill starts making base's spare files, unless that is under way, and
// returns what waits until it is done.
func refill(base string) (wait func()) {
	d := spareDirOf(base)
	d.mu.Lock()
	if d.filling || d.off || len(d.names) >= sparesPerDir {
		d.mu.Unlock()
		return func() {}
	}
	d.filling = true
	d.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.fill(base)
	}()
	return func() { <-done }
}

// fill makes spare files until there are sparesPerDir.
func (d *spareDir) fill(base string) {
	defer func() {
		d.mu.Lock()
		d.filling = false
		d.mu.Unlock()
	}()
	dir := base + "/.spare"
	for {
		d.mu.Lock()
		n, off := len(d.names), d.off
		d.mu.Unlock()
		if n >= sparesPerDir || off {
			return
		}
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return
		}
		name := dir + "/" + hex.EncodeToString(b[:])
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrNotExist) {
			if os.Mkdir(dir, 0o700) != nil {
				return
			}
			f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		}
		if err != nil {
			return // the next attempt tries again; this one creates its files
		}
		f.Close()
		d.give(name)
	}
}
