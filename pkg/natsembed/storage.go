package natsembed

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A nats-server that cannot write a stream's file (its disk full: "no
// space left on device") keeps that write error for the stream and stops
// answering its publishes: once the space is back the stream still takes
// nothing (measured with the pinned server: every write times out, and a
// purge or a stream update does not clear it). Only loading the stream
// from disk again does, which a single server does when it restarts. The
// embedded server does it itself instead: it looks for streams with a
// write error every StorageCheckInterval, says so once per stream, and
// once StorageRepairFree bytes are free where it stores, it loads the
// account's streams from disk again (JetStream disabled and enabled for
// that account: what they held stays, consumers keep their positions).

// StorageCheckInterval is how often the embedded server looks for streams
// that hit a write error.
var StorageCheckInterval = time.Second

// StorageRepairFree is the free space, in bytes, the store's file system
// needs before a stream that hit a write error is loaded again: enough
// that the next writes do not fill it at once.
var StorageRepairFree uint64 = 32 << 20

// writeError is a stream that hit a write error, as the server's health
// check reports it.
type writeError struct {
	Account, Stream, Err string
}

// writeErrors are the streams the health report says hit a write error.
func writeErrors(errs []server.HealthzError) []writeError {
	var out []writeError
	for _, e := range errs {
		if e.Type == server.HealthzErrorStream && strings.Contains(e.Error, "write error") {
			out = append(out, writeError{e.Account, e.Stream, e.Error})
		}
	}
	return out
}

// repairer watches a server's streams for write errors and loads their
// accounts again once there is room.
type repairer struct {
	srv  *server.Server
	dir  string
	log  *slog.Logger
	free func(dir string) (uint64, error)
	// known are the write errors already logged, by account/stream.
	known map[string]bool
	stop  chan struct{}
	once  sync.Once
	done  sync.WaitGroup
}

func newRepairer(srv *server.Server, dir string, log *slog.Logger) *repairer {
	if log == nil {
		log = slog.Default()
	}
	return &repairer{srv: srv, dir: dir, log: log, free: freeSpace, known: map[string]bool{}, stop: make(chan struct{})}
}

func (r *repairer) start() {
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		t := time.NewTicker(StorageCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				r.check()
			}
		}
	}()
}

func (r *repairer) close() {
	r.once.Do(func() { close(r.stop) })
	r.done.Wait()
}

// check looks for write errors once, and repairs when there is room.
func (r *repairer) check() {
	h := r.srv.Healthz(&server.HealthzOptions{Details: true})
	broken := writeErrors(h.Errors)
	for _, w := range broken {
		if k := w.Account + "/" + w.Stream; !r.known[k] {
			r.known[k] = true
			r.log.Error("JetStream cannot store on "+w.Stream+": a write failed and the stream takes no more writes until it is loaded again (done here once there is room)",
				"stream", w.Stream, "account", w.Account, "cause", w.Err, "store_dir", r.dir, "needs_free", fmt.Sprintf("%d MiB", StorageRepairFree>>20))
		}
	}
	if len(broken) == 0 {
		return
	}
	free, err := r.free(r.dir)
	if err != nil || free < StorageRepairFree {
		return
	}
	r.reload(broken, free)
}

// reload loads each account with a broken stream from disk again.
func (r *repairer) reload(broken []writeError, free uint64) {
	byAccount := map[string][]string{}
	for _, w := range broken {
		byAccount[w.Account] = append(byAccount[w.Account], w.Stream)
	}
	for name, streams := range byAccount {
		slices.Sort(streams)
		acc, err := r.srv.LookupAccount(name)
		if err == nil {
			err = reloadAccount(acc)
		}
		if err != nil {
			r.log.Error("cannot load JetStream's streams again", "account", name, "streams", streams, "err", err)
			continue
		}
		for _, s := range streams {
			delete(r.known, name+"/"+s)
		}
		r.log.Warn("space is back: loaded the account's JetStream streams from disk again; "+strings.Join(streams, ", ")+" take writes again",
			"account", name, "streams", streams, "store_dir", r.dir, "free", fmt.Sprintf("%d MiB", free>>20))
	}
}

// reloadAccount disables and enables JetStream for acc: its streams and
// consumers are stopped (what they hold stays on disk) and recovered from
// disk, without the write errors they kept.
func reloadAccount(acc *server.Account) error {
	if err := acc.DisableJetStream(); err != nil {
		return fmt.Errorf("disable JetStream: %w", err)
	}
	if err := acc.EnableJetStream(nil, nil); err != nil {
		return fmt.Errorf("enable JetStream: %w", err)
	}
	return nil
}

// freeSpace is what an unprivileged process may still write in the file
// system holding dir.
func freeSpace(dir string) (uint64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return fs.Bavail * uint64(fs.Bsize), nil
}
