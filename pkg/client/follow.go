package client

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FollowOptions say what a Feed reads: the subjects (Subjects, a stream
// filter each) of one stream, from where. From a stream sequence
// (StartSeq), else from a time (Since), else only what is published from
// now on.
type FollowOptions struct {
	Stream   string // events.StreamEvents, events.StreamLogs
	Subjects []string
	StartSeq uint64
	Since    time.Time
	// Skipped, when set, is told of every message the feed does not give
	// out, and why: one that is not a gantry event (its Envelope nil),
	// or one events.Admit refuses (forged, or misrouted).
	Skipped func(m *Message, err error)
}

// Message is one event a Feed gives out: its gantry envelope, parsed and
// admitted (events.Admit), and where it was in the stream.
type Message struct {
	Subject  string
	Header   nats.Header
	Data     []byte // the CloudEvent as it is on the bus
	Envelope *events.Envelope
	Seq      uint64 // in the stream
	// ConsumerSeq is its place in what the feed delivered (CaughtUp).
	ConsumerSeq uint64
	// Pending is how many of the subjects' messages the stream held
	// after it when it was delivered: 0 when the feed has caught up.
	Pending uint64
}

// Feed reads a stream with an ordered consumer (no state on the server
// beyond the feed, a viewer may open one). Its messages end when its
// context does. One goroutine reads a feed.
type Feed struct {
	ctx       context.Context
	cons      jetstream.Consumer
	msgs      jetstream.MessagesContext
	skipped   func(*Message, error)
	delivered uint64 // the consumer sequence of the last message read, given out or not
}

// Follow opens a feed of o's stream; it stops when ctx ends (or Stop).
func (c *Client) Follow(ctx context.Context, o FollowOptions) (*Feed, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: o.Subjects, DeliverPolicy: jetstream.DeliverNewPolicy}
	switch {
	case o.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, o.StartSeq
	case !o.Since.IsZero():
		since := o.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := js.OrderedConsumer(ctx, o.Stream, cfg)
	if err != nil {
		return nil, err
	}
	msgs, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); msgs.Stop() }()
	return &Feed{ctx: ctx, cons: cons, msgs: msgs, skipped: o.Skipped}, nil
}

// Pending is how many of the subjects' messages the stream held from the
// start when the feed opened: 0 when there is no history to read.
func (f *Feed) Pending() uint64 {
	if ci := f.cons.CachedInfo(); ci != nil {
		return ci.NumPending
	}
	return 0
}

// Stop ends the feed.
func (f *Feed) Stop() { f.msgs.Stop() }

// Messages gives out the feed's messages in stream order (see Next) until
// the feed stops: then it gives the reason once and ends.
func (f *Feed) Messages() iter.Seq2[*Message, error] {
	return func(yield func(*Message, error) bool) {
		for {
			m, err := f.Next()
			if !yield(m, err) || err != nil {
				return
			}
		}
	}
}

// Next waits for the feed's next message, skipping what is not a gantry
// event or is refused (FollowOptions.Skipped). An error means the feed
// has stopped: the context's error when that ended it.
func (f *Feed) Next() (*Message, error) { return f.next() }

// NextWithin is Next waiting at most wait: nats.ErrTimeout when no
// message came by then (the feed goes on).
func (f *Feed) NextWithin(wait time.Duration) (*Message, error) {
	return f.next(jetstream.NextMaxWait(wait))
}

func (f *Feed) next(opts ...jetstream.NextOpt) (*Message, error) {
	for {
		m, err := f.msgs.Next(opts...)
		if errors.Is(err, nats.ErrTimeout) && f.ctx.Err() == nil {
			return nil, nats.ErrTimeout
		}
		if err != nil {
			if f.ctx.Err() != nil {
				return nil, f.ctx.Err()
			}
			return nil, err
		}
		if msg, ok := f.admit(m); ok {
			return msg, nil
		}
	}
}

// admit parses a stream message and applies events.Admit.
func (f *Feed) admit(m jetstream.Msg) (*Message, bool) {
	msg := &Message{Subject: m.Subject(), Header: nats.Header(m.Headers()), Data: m.Data()}
	if md, err := m.Metadata(); err == nil {
		msg.Seq, msg.ConsumerSeq, msg.Pending = md.Sequence.Stream, md.Sequence.Consumer, md.NumPending
		f.delivered = md.Sequence.Consumer
	}
	env, err := events.Parse(m.Data())
	if err == nil {
		msg.Envelope = env
		err = events.Admit(m.Subject(), env)
	}
	if err != nil {
		if f.skipped != nil {
			f.skipped(msg, err)
		}
		return nil, false
	}
	return msg, true
}

// CaughtUp asks the server whether the feed has nothing more to deliver:
// nothing pending, and all it delivered read (by Next).
func (f *Feed) CaughtUp(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := f.cons.Info(ctx)
	return err == nil && info.NumPending == 0 && info.Delivered.Consumer <= f.delivered
}
