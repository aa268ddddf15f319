package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startFloorServer is a nats-server with JetStream on a temporary
// directory and a password, as busFloor starts one.
func startFloorServer(t *testing.T) (string, nats.Option) {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: "bench", Password: "floor-test", NoSigs: true, NoLog: true}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL(), nats.UserInfo("bench", "floor-test")
}

// TestBusFloorStoresWhatItsShapeSays runs each shape the bench measures
// over a few links and counts what the streams hold: the floor's figures
// are only a floor of gantry's link if each link stores what the shape
// names, and a durable shape's commands ran as durable attempts.
func TestBusFloorStoresWhatItsShapeSays(t *testing.T) {
	const links = 12
	for _, shape := range busFloorShapes {
		t.Run(shape.key(), func(t *testing.T) {
			url, auth := startFloorServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run := floorRun{floorShape: shape, links: links}
			if shape.durable {
				run.attempts = filepath.Join(t.TempDir(), "attempts")
			}
			ms, err := floorLoop(ctx, url, auth, run)
			if err != nil {
				t.Fatal(err)
			}
			if ms <= 0 {
				t.Fatalf("ms per link %v", ms)
			}
			want := map[string]int{"DISPATCH": links, "OUTCOME": links, "RECORD": 0, "MORE": shape.more * links}
			if shape.record {
				want["RECORD"] = links
			}
			got := streamCounts(ctx, t, url, auth, "DISPATCH", "OUTCOME", "RECORD", "MORE")
			total := 0
			for name, n := range want {
				total += got[name]
				if got[name] != n {
					t.Errorf("stream %s holds %d messages, want %d", name, got[name], n)
				}
			}
			if total != shape.stored()*links {
				t.Errorf("%d messages stored over %d links, the shape says %d per link", total, links, shape.stored())
			}
			ran := 0
			if shape.durable {
				for i := range links {
					if _, err := os.Stat(filepath.Join(run.attempts, fmt.Sprintf("floor.%d.run", i))); err == nil {
						ran++
					}
				}
			}
			if shape.durable && ran != links {
				t.Errorf("%d of %d links ran a durable attempt", ran, links)
			}
			if !shape.durable && run.attempts != "" {
				t.Error("a bare shape got an attempts directory")
			}
		})
	}
}

func streamCounts(ctx context.Context, t *testing.T, url string, auth nats.Option, names ...string) map[string]int {
	t.Helper()
	nc, err := nats.Connect(url, auth)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, name := range names {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = int(info.State.Msgs)
	}
	return got
}
