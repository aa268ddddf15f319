package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExt4WithoutJournalIsTold: the bench tells a directory on ext4
// without a journal from one on ext4 with one and from any other file
// system, by what the kernel lists under /sys/dev/block, /proc/fs/ext4
// and /proc/fs/jbd2 (here a copy of them naming the test's own directory's
// device).
func TestExt4WithoutJournalIsTold(t *testing.T) {
	dir := t.TempDir()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	dev := uint64(st.Dev)
	for _, c := range []struct {
		name          string
		ext4, journal bool
		want          string
	}{
		{"ext4 without a journal", true, false, "sdz"},
		{"ext4 with a journal", true, true, ""},
		{"not ext4", false, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			roots := procRoots{sys: t.TempDir(), proc: t.TempDir()}
			blocks := filepath.Join(roots.sys, "dev", "block")
			mustMkdir(t, blocks, filepath.Join(roots.proc, "fs", "jbd2"))
			if err := os.Symlink("../../devices/virtual/block/sdz", filepath.Join(blocks, fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev)))); err != nil {
				t.Fatal(err)
			}
			if c.ext4 {
				mustMkdir(t, filepath.Join(roots.proc, "fs", "ext4", "sdz"))
			}
			if c.journal {
				mustMkdir(t, filepath.Join(roots.proc, "fs", "jbd2", "sdz-8"))
			}
			if got := roots.ext4WithoutJournal(dir); got != c.want {
				t.Errorf("ext4WithoutJournal = %q, want %q", got, c.want)
			}
		})
	}
	if got := (procRoots{sys: t.TempDir(), proc: t.TempDir()}).ext4WithoutJournal(dir); got != "" {
		t.Errorf("a device the kernel does not list: %q, want none", got)
	}
}

func mustMkdir(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
