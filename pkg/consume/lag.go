package consume

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The backlog of the durable consumers gantry's services pull from (the
// dispatch and gate work queues, the planner's events), from JetStream's
// consumer info, polled by WatchLag.
var (
	pending = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gantry_consumer_pending_messages",
		Help: "Messages in a consumer's stream not yet delivered to it: queued work (dispatch, gates) or events the planner has not read.",
	}, []string{"stream", "consumer"})
	ackPending = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gantry_consumer_ack_pending_messages",
		Help: "Messages delivered to a consumer and not yet acknowledged: work in progress.",
	}, []string{"stream", "consumer"})
)

// LagInterval is how often WatchLag polls.
const LagInterval = 5 * time.Second

// WatchLag sets the pending and ack-pending gauges of the durable
// consumer stream/name every interval (LagInterval when 0) until ctx
// ends. A failed poll keeps the last values and is logged at debug.
func WatchLag(ctx context.Context, js jetstream.JetStream, stream, name string, interval time.Duration, log *slog.Logger) {
	if interval <= 0 {
		interval = LagInterval
	}
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := PollLag(ctx, js, stream, name); err != nil && ctx.Err() == nil {
			log.Debug("consumer info for metrics", "stream", stream, "consumer", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PollLag sets the gauges of stream/name once.
func PollLag(ctx context.Context, js jetstream.JetStream, stream, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, name)
	if err != nil {
		return err
	}
	i := c.CachedInfo()
	pending.WithLabelValues(stream, name).Set(float64(i.NumPending))
	ackPending.WithLabelValues(stream, name).Set(float64(i.NumAckPending))
	return nil
}
