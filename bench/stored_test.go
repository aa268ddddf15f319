package main

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStoredBetween(t *testing.T) {
	cases := []struct {
		name          string
		before, after streamStates
		want          map[string]uint64
	}{
		{"growth of the last sequence, not of the messages held",
			streamStates{"KV_b": {Msgs: 3, LastSeq: 10}, "WQ": {Msgs: 0, LastSeq: 7}},
			streamStates{"KV_b": {Msgs: 3, LastSeq: 25}, "WQ": {Msgs: 0, LastSeq: 9}},
			map[string]uint64{"KV_b": 15, "WQ": 2}},
		{"a stream made in between counts from its start",
			streamStates{},
			streamStates{"NEW": {Msgs: 1, LastSeq: 4}},
			map[string]uint64{"NEW": 4}},
		{"a stream re-created in between counts what it stored since",
			streamStates{"S": {Msgs: 50, LastSeq: 50}},
			streamStates{"S": {Msgs: 3, LastSeq: 3}},
			map[string]uint64{"S": 3}},
		{"streams that stored nothing, or went away, are left out",
			streamStates{"S": {LastSeq: 5}, "GONE": {LastSeq: 9}},
			streamStates{"S": {LastSeq: 5}},
			map[string]uint64{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := storedBetween(c.before, c.after); !maps.Equal(got, c.want) {
				t.Errorf("storedBetween = %v, want %v", got, c.want)
			}
		})
	}
}

func TestUsagePerNode(t *testing.T) {
	u := newUsage()
	u.add(snapshot{cpu: map[string]float64{"executor": 1}, streams: streamStates{"E": {LastSeq: 100}}},
		snapshot{cpu: map[string]float64{"executor": 3}, streams: streamStates{"E": {LastSeq: 600}}})
	u.add(snapshot{cpu: map[string]float64{"executor": 10}, streams: streamStates{"E": {LastSeq: 2000}}},
		snapshot{cpu: map[string]float64{"executor": 12}, streams: streamStates{"E": {LastSeq: 2500}}})
	cpu, stored := u.perNode(100) // 2 runs of 100 nodes: 4 CPU s, 1000 messages
	if cpu["executor"] != 20 || stored["E"] != 5 {
		t.Errorf("per node: CPU %v ms, stored %v; want 20 ms and 5", cpu, stored)
	}
}

// TestStreamCountsFromTheMonitor counts, through nats-server's /jsz as
// the bench does, what a stream, a KV bucket and a work queue stored
// between two reads, with keys overwritten and messages deleted or
// consumed in between: each counts every message stored.
func TestStreamCountsFromTheMonitor(t *testing.T) {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, HTTPHost: "127.0.0.1", HTTPPort: -1, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	monitor := fmt.Sprintf("http://127.0.0.1:%d", s.MonitorAddr().Port)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := jetstream.New(nc)
	ev, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WQ", Subjects: []string{"wq.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	pub := func(subj string, n int) {
		for range n {
			if _, err := js.Publish(ctx, subj, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	pub("ev.a", 2) // before the first read
	before, err := readStreams(ctx, monitor)
	if err != nil {
		t.Fatal(err)
	}
	inBefore, err := readInBytes(ctx, monitor)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "ev.big", make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if in, err := readInBytes(ctx, monitor); err != nil || in-inBefore < 64<<10 || in-inBefore > 66<<10 {
		t.Errorf("bytes in grew by %d over a publish of 64 KiB (%v)", in-inBefore, err)
	}
	pub("ev.a", 4)
	if err := ev.DeleteMsg(ctx, 4); err != nil {
		t.Fatal(err)
	}
	for i := range 10 { // 10 writes of 2 keys
		if _, err := kv.Put(ctx, fmt.Sprintf("k%d", i%2), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	pub("wq.a", 3)
	cons, err := js.CreateOrUpdateConsumer(ctx, "WQ", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	after, err := readStreams(ctx, monitor)
	if err != nil {
		t.Fatal(err)
	}
	if after["WQ"].Msgs != 0 || after["KV_b"].Msgs != 2 || after["EV"].Msgs != 6 {
		t.Fatalf("the streams hold %v: the work queue should be empty, the bucket hold 2 keys and EV 6 messages", after)
	}
	want := map[string]uint64{"EV": 5, "KV_b": 10, "WQ": 3}
	if got := storedBetween(before, after); !maps.Equal(got, want) {
		t.Errorf("stored between the reads: %v, want %v", got, want)
	}
}
