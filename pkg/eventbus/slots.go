package eventbus

import (
	"context"
	"errors"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// ExecutorConsumer is the durable consumer of the executors of a zone on
// GANTRY_DISPATCH ("" for executors started without one): ConsumerExecutor,
// or executor-zone-<zone>. Their filters do not overlap, as a work queue
// needs: zoned work goes only to its zone's executors.
func ExecutorConsumer(zone string) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:        events.ExecutorDurable(""),
		Description:    "executors: run dispatched formulas of hosts without a zone",
		FilterSubjects: []string{events.ZoneDispatch("")},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        WorkAckWait,
		MaxDeliver:     MaxDeliverWork,
		MaxAckPending:  ExecutorMaxAcks,
	}
	if zone != "" {
		cfg.Durable = events.ExecutorDurable(zone)
		cfg.Description = "executors of zone " + zone + ": run dispatched formulas of its hosts"
		cfg.FilterSubjects = []string{events.ZoneDispatch(zone)}
	}
	return cfg
}

// ZoneTakers reads the state of the consumer that takes the zone's
// dispatches.
func ZoneTakers(ctx context.Context, js jetstream.JetStream, zone string) (events.Takers, error) {
	name := events.ExecutorDurable(zone)
	t := events.Takers{Zone: zone, Consumer: name}
	c, err := js.Consumer(ctx, events.StreamDispatch, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("consumer %s: %w", name, err)
	}
	ci := c.CachedInfo()
	t.Exists, t.Pulling, t.InHand, t.Queued = true, ci.NumWaiting, ci.NumAckPending, ci.NumPending
	return t, nil
}
