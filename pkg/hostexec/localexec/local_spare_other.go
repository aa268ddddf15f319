//go:build !linux

package localexec

import (
	"os"

	"golang.org/x/sys/unix"
)

// Spare files need O_TMPFILE and linkat through /proc (Linux): elsewhere
// openSpare turns spares off and every attempt's files are created.

func linkSpare(*os.File, string) error { return unix.EOPNOTSUPP }

func openSpare(string) (*os.File, error) { return nil, unix.EOPNOTSUPP }
