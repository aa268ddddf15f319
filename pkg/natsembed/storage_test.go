package natsembed_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStreamTakesWritesAgainOnceSpaceIsBack: a bucket whose stream hit
// "no space left on device" takes no writes even once the space is back
// (nats-server keeps the stream's write error); the embedded server
// notices, says so, and loads the stream again once there is room, and
// the bucket then takes writes again with what it held before.
func TestStreamTakesWritesAgainOnceSpaceIsBack(t *testing.T) {
	dir := mountTmpfs(t, 64<<20)
	logs := &syncBuffer{}
	ns := natstest.StartWith(t, natsembed.Config{StoreDir: filepath.Join(dir, "js"), MaxStore: 2 << 30, Log: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()
	js, _ := jetstream.New(ns.Connect(busauth.Admin))
	if err := events.Ensure(ctx, js, events.Executor, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.BucketSlots)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := kv.Put(ctx, key, bytes.Repeat([]byte("x"), 2000))
		return err
	}
	if err := put("before"); err != nil {
		t.Fatal(err)
	}
	filler := fillUp(t, dir)
	var failed error
	for i := 0; i < 20 && failed == nil; i++ {
		failed = put(fmt.Sprintf("full-%d", i))
	}
	if failed == nil {
		t.Fatal("the bucket took 20 writes of 2 kB on a full file system")
	}
	t.Logf("a write on the full file system: %v", failed)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for put("after") != nil {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the bucket takes no writes 10s after the space came back; server log:\n%s", logs)
		}
	}
	t.Logf("writes go through again %.1fs after the space came back", time.Since(start).Seconds())
	if _, err := kv.Get(ctx, "before"); err != nil {
		t.Errorf("what the bucket held before: %v", err)
	}
	for _, want := range []string{"JetStream cannot store on KV_gantry_slots", "space is back"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, unmounted
// when the test ends (after what was cleaned up later than this call).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs on %s (this test needs root): %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillUp writes a file in dir until its file system has no space left.
func fillUp(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill %s: %v", path, err)
				}
				break
			}
		}
	}
	return path
}

// syncBuffer is a bytes.Buffer that several goroutines may write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
