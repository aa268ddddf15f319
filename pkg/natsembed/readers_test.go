package natsembed_test

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPeoplesLogConsumersExpire: people read GANTRY_LOGS with consumers
// they create, and the JetStream API cannot refuse a durable one by
// subject; every consumer on the log stream (which no service pulls from
// by name) is deleted once idle for LogsConsumerIdle, so readers cannot
// leave consumers behind for ever.
func TestPeoplesLogConsumersExpire(t *testing.T) {
	ns := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin, _ := jetstream.New(ns.Connect(busauth.Admin))
	if err := eventbus.Ensure(ctx, admin, events.Executor, 1); err != nil {
		t.Fatal(err)
	}
	viewer, _ := jetstream.New(ns.Connect(events.Viewer))
	c, err := viewer.CreateConsumer(ctx, events.StreamLogs, jetstream.ConsumerConfig{Durable: "left-behind", AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.InactiveThreshold; got <= 0 || got > eventbus.LogsConsumerIdle {
		t.Fatalf("a viewer's durable consumer on %s is kept %v idle, want at most %v", events.StreamLogs, got, eventbus.LogsConsumerIdle)
	}
	if _, err := viewer.CreateConsumer(ctx, events.StreamLogs, jetstream.ConsumerConfig{Durable: "for-ever", InactiveThreshold: 100 * 24 * time.Hour}); err == nil {
		t.Errorf("a viewer's durable consumer on %s asked to be kept 100 days idle was created", events.StreamLogs)
	}
}

// TestLogConsumerLimitOnAnExistingStream: a log stream made before the
// limit gets it when a service ensures the topology.
func TestLogConsumerLimitOnAnExistingStream(t *testing.T) {
	ns := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin, _ := jetstream.New(ns.Connect(busauth.Admin))
	var old jetstream.StreamConfig
	for _, c := range eventbus.Streams(1) {
		if c.Name == events.StreamLogs {
			old = c
		}
	}
	old.ConsumerLimits = jetstream.StreamConsumerLimits{}
	if _, err := admin.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := eventbus.Ensure(ctx, admin, events.Executor, 1); err != nil {
		t.Fatal(err)
	}
	s, err := admin.Stream(ctx, events.StreamLogs)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.ConsumerLimits.InactiveThreshold; got != eventbus.LogsConsumerIdle {
		t.Errorf("existing log stream's consumer idle limit: %v", got)
	}
}
