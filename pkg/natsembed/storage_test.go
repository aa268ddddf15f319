package natsembed_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/eventbus"
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
	dir := natstest.MountTmpfs(t, 64<<20)
	logs := &syncBuffer{}
	ns := natstest.StartWith(t, natsembed.Config{StoreDir: filepath.Join(dir, "js"), MaxStore: 2 << 30, Log: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()
	js, _ := jetstream.New(ns.Connect(busauth.Admin))
	if err := eventbus.Ensure(ctx, js, events.Executor, 1); err != nil {
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
	filler := natstest.FillUp(t, dir)
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
