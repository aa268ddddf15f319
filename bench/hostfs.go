package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The bench's sshd hosts are this machine, and a durable attempt creates
// its files (run, out, err, id) in $HOME/.gantry/attempts there. On ext4
// without a journal, each file created makes the kernel look at recently
// deleted inodes for one it may take (find_inode_bit's recently_deleted):
// after many files were deleted (a test's temporary directories, a build),
// a durable attempt costs its host several times what it costs on a
// server's ext4, which has a journal (here 1.5-1.8 s against 0.5 s for
// ssh-500's durable floor, the same runs). ssh-500 then measures this VM's
// file system more than gantry; the bench says so.

// procRoots are where the kernel tells about block devices and file
// systems (a test points them elsewhere).
type procRoots struct{ sys, proc string }

var hostRoots = procRoots{sys: "/sys", proc: "/proc"}

// ext4WithoutJournal names the block device of dir when dir is on ext4
// mounted without a journal; "" when it is not (or cannot be told).
func (r procRoots) ext4WithoutJournal(dir string) string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return ""
	}
	dev := uint64(st.Dev) // uint32 on some platforms
	link, err := os.Readlink(filepath.Join(r.sys, "dev", "block", fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))))
	if err != nil {
		return ""
	}
	name := filepath.Base(link)
	if _, err := os.Stat(filepath.Join(r.proc, "fs", "ext4", name)); err != nil {
		return ""
	}
	if journals, _ := filepath.Glob(filepath.Join(r.proc, "fs", "jbd2", name+"-*")); len(journals) > 0 {
		return ""
	}
	return name
}

// hostFSNote is a line on where ssh-500's hosts keep their attempts, when
// that skews the figures; "" otherwise.
func hostFSNote() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	dir := filepath.Join(home, ".gantry")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	if dev := hostRoots.ext4WithoutJournal(dir); dev != "" {
		return fmt.Sprintf("the hosts' attempts (%s) are on ext4 without a journal (%s): each file a durable attempt creates scans recently deleted inodes, "+
			"so gantry's host side and the durable floors cost more than on a server's ext4; mount an ext4 with a journal on %s to measure as on a server", dir, dev, dir)
	}
	return ""
}
