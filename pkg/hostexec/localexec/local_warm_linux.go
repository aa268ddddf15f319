package localexec

import "golang.org/x/sys/unix"

// pidfdGetfd is pidfd_getfd(2) (a test makes it fail, as a kernel or a
// seccomp profile that refuses it does).
var pidfdGetfd = unix.PidfdGetfd

// shellLock returns a descriptor of the open file description the shell
// pid has on its fd 9 (the lock file): a lock taken on it is the shell's.
// An error says the kernel refused, or the shell is gone.
func shellLock(pid int) (int, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pidfd)
	fd, err := pidfdGetfd(pidfd, 9, 0)
	if err != nil {
		return -1, err
	}
	return fd, nil
}
