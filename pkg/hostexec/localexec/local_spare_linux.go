package localexec

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// linkSpare gives the unnamed file f the name dst (linkat through
// /proc/self/fd), never replacing anything: EEXIST when dst exists.
func linkSpare(f *os.File, dst string) error {
	fd := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	// A spare may have waited longer than the sweep's 7 days: it gets the
	// time it is used before it has a name, or the sweep that follows the
	// claim (here or in another process) removes it.
	now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	err := unix.UtimesNanoAt(unix.AT_FDCWD, fd, now, 0)
	if err == nil {
		err = unix.Linkat(unix.AT_FDCWD, fd, unix.AT_FDCWD, dst, unix.AT_SYMLINK_FOLLOW)
	}
	return err
}

// openSpare makes an unnamed file in base (O_TMPFILE).
func openSpare(base string) (*os.File, error) {
	fd, err := unix.Open(base, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), base+"/(spare)"), nil
}
