package consume

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// FollowHandler applies, in stream order, a batch of events a Follow
// delivered together; last is the stream sequence of the batch's last
// message (it may be one that did not parse, which is logged and left out
// of evs). It returns only once the batch's effects are durable or when
// ctx ends: Follow does not deliver anything twice, so a handler retries
// its own failures.
type FollowHandler func(ctx context.Context, evs []*Event, last uint64)

// FollowGrace is how long a FollowHandler may go on finishing the batch
// in hand once Follow is asked to stop.
const FollowGrace = 5 * time.Second

// Follow reads stream in order from stream sequence from (0 or 1: from
// the start) with an ordered consumer: ephemeral, without acks, and
// recreated by the client at the next sequence whenever a delivery is
// missed or the server restarts, so nothing is skipped and nothing
// overtakes. Where to resume is the handler's own record (a checkpoint
// written after its effects), not a durable consumer's ack floor; so a
// handler may take many events at a time and still see every one in
// order. Each batch is every message already delivered, at most
// o.Prefetch. Follow returns nil when ctx is cancelled, after the batch
// in hand; if the client stops delivering before that (its iterator
// closed, or its consumer could not be re-created at the first try), it
// returns ErrFollowEnded, or the error, with the sequence to go on from
// in the caller's own record.
func Follow(ctx context.Context, js jetstream.JetStream, stream string, from uint64, h FollowHandler, o Options) error {
	// One try to re-create the consumer: a reset that fails ends the
	// follow here, where the caller says so and follows again with its
	// own waits, instead of being retried unseen inside the client with
	// waits growing to 10 s between tries of 10 s each.
	cfg := jetstream.OrderedConsumerConfig{MaxResetAttempts: 1}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("%s: follow %s: %w", o.Name, stream, err)
	}
	src, o, err := start(ctx, cons, o)
	if err != nil {
		return err
	}
	// The batch in hand gets a little longer than ctx, to become durable.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	context.AfterFunc(ctx, func() { time.AfterFunc(FollowGrace, cancel) })
	evs := make([]*Event, 0, o.Prefetch)
	batches(src, o, func(batch []jetstream.Msg) {
		evs = evs[:0]
		var last uint64
		for _, msg := range batch {
			meta, err := msg.Metadata()
			if err != nil {
				o.Logger.Error("message without metadata", "consumer", o.Name, "subject", msg.Subject(), "err", err)
				continue
			}
			last = meta.Sequence.Stream
			env, err := events.Parse(msg.Data())
			if err != nil {
				o.Logger.Error("skipping an event that does not parse", "consumer", o.Name, "subject", msg.Subject(), "stream_seq", last, "err", err)
				continue
			}
			if !admit(o, msg.Subject(), last, env) {
				continue
			}
			evs = append(evs, &Event{Envelope: env, Subject: msg.Subject(), Stream: last, Delivered: meta.NumDelivered, Header: msg.Headers()})
		}
		if last > 0 && hctx.Err() == nil {
			h(hctx, evs, last)
		}
	})
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("%s: follow %s: %w", o.Name, stream, ErrFollowEnded)
}

// ErrFollowEnded: the client stopped delivering a followed stream while
// its follower still wanted it (the iterator closed under it).
var ErrFollowEnded = errors.New("the stream stopped being delivered")
