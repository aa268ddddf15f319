//go:build !linux

package localexec

import "errors"

// shellLock needs pidfds (Linux): elsewhere attempts with a lock take a
// cold shell.
func shellLock(int) (int, error) {
	return -1, errors.ErrUnsupported
}
