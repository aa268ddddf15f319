package eventbus_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
)

// The JetStream settings are built for the topology pkg/events names, and
// for nothing else: every stream with its subjects, every durable
// consumer, every bucket, which is what the permissions are derived from.
func TestSettingsFollowTheTopology(t *testing.T) {
	var streams []string
	for _, cfg := range eventbus.Streams(1) {
		streams = append(streams, cfg.Name)
		if want := events.StreamSubjects(cfg.Name); !slices.Equal(cfg.Subjects, want) {
			t.Errorf("stream %s stores %v, the topology says %v", cfg.Name, cfg.Subjects, want)
		}
	}
	if !slices.Equal(streams, events.StreamNames) {
		t.Errorf("streams %v, the topology has %v", streams, events.StreamNames)
	}
	consumers := eventbus.Consumers()
	if got := slices.Sorted(maps.Keys(consumers)); !slices.Equal(got, []string{events.StreamDispatch, events.StreamEvents, events.StreamGates}) {
		t.Errorf("durable consumers on %v", got)
	}
	for _, stream := range events.StreamNames {
		var names []string
		for _, c := range consumers[stream] {
			names = append(names, c.Durable)
			if c.Durable == "" || c.MaxDeliver <= 0 {
				t.Errorf("%s: consumer %+v must be durable with a bounded MaxDeliver", stream, c)
			}
		}
		if !slices.Equal(names, events.Durables(stream)) {
			t.Errorf("durable consumers of %s: %v, the topology has %v", stream, names, events.Durables(stream))
		}
	}
	var buckets []string
	for _, kv := range eventbus.KeyValues(1) {
		buckets = append(buckets, kv.Bucket)
	}
	if !slices.Equal(buckets, events.BucketNames) {
		t.Errorf("buckets %v, the topology has %v", buckets, events.BucketNames)
	}
	for _, zone := range []string{"", "eu-1"} {
		if got, want := eventbus.ExecutorConsumer(zone).Durable, events.ExecutorDurable(zone); got != want {
			t.Errorf("zone %q: consumer %s, the topology names %s", zone, got, want)
		}
	}
}
