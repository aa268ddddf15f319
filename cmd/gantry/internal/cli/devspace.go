package cli

import (
	"fmt"
	"syscall"

	"github.com/gantry-dev/gantry/pkg/eventbus"
)

// devWorkingRoom is what gantry dev wants JetStream to have besides the
// output-line stream's reservation: room for the events, work and
// buckets a run writes.
const devWorkingRoom = 256 << 20

// devStoreNeed is the free space gantry dev needs where JetStream stores
// its data: the embedded server takes at most three quarters of what is
// free when it starts, and GANTRY_LOGS reserves eventbus.LogsMaxBytes of it
// whether or not it is used. With less, the stream cannot be made and dev
// would stop in the middle of a run.
const devStoreNeed = (eventbus.LogsMaxBytes + devWorkingRoom) / 3 * 4

// checkStoreSpace refuses a data dir whose file system has less free
// space than devStoreNeed, naming the need and what is there.
func checkStoreSpace(dir string, free func(string) (uint64, error)) error {
	have, err := free(dir)
	if err != nil {
		return fmt.Errorf("free space in %s: %w", dir, err)
	}
	if have >= devStoreNeed {
		return nil
	}
	return fmt.Errorf("gantry dev needs %s free in %s for JetStream (the output-line stream reserves %s, plus %s to work in, and JetStream takes at most 3/4 of what is free): %s free; free some space or give --data-dir on a larger disk",
		gib(devStoreNeed), dir, gib(eventbus.LogsMaxBytes), mib(devWorkingRoom), gib(have))
}

// freeSpace is the space an unprivileged process may still write in the
// file system holding dir.
func freeSpace(dir string) (uint64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return fs.Bavail * uint64(fs.Bsize), nil
}

func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
func mib(n uint64) string { return fmt.Sprintf("%d MiB", n>>20) }
