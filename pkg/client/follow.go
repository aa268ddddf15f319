package client

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
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
	ctx      context.Context
	nc       *nats.Conn
	stream   string
	subjects []string // the filters, or ">" for the whole stream
	cons     jetstream.Consumer
	msgs     jetstream.MessagesContext
	skipped  func(*Message, error)
	readSeq  uint64 // the stream sequence of the last message read, given out or not
	pending  uint64 // what the stream held after the last message read (Message.Pending)
}

// Follow opens a feed of o's stream; it stops when ctx ends (or Stop).
func (c *Client) Follow(ctx context.Context, o FollowOptions) (*Feed, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: o.Subjects, DeliverPolicy: jetstream.DeliverNewPolicy}
	switch {
	case o.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, o.StartSeq
	case !o.Since.IsZero():
		since := o.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := c.js.OrderedConsumer(ctx, o.Stream, cfg)
	if err != nil {
		return nil, err
	}
	msgs, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	subjects, err := c.feedSubjects(ctx, o)
	if err != nil {
		msgs.Stop()
		return nil, err
	}
	go func() { <-ctx.Done(); msgs.Stop() }()
	f := &Feed{ctx: ctx, nc: c.nc, stream: o.Stream, subjects: subjects, cons: cons, msgs: msgs, skipped: o.Skipped}
	if ci := cons.CachedInfo(); ci != nil {
		f.readSeq = ci.Delivered.Stream // where it starts, less one: what came before is not the feed's
	}
	f.pending = f.Pending()
	return f, nil
}

// feedSubjects are the subjects a feed of o reads, for CaughtUp: o's, or
// the stream's own (a last-message get of ">" answers only for the
// stream's last sequence, which a deleted message leaves empty).
func (c *Client) feedSubjects(ctx context.Context, o FollowOptions) ([]string, error) {
	if len(o.Subjects) > 0 {
		return o.Subjects, nil
	}
	s, err := c.js.Stream(ctx, o.Stream)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo().Config.Subjects, nil
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
		m, ok, err := f.read(opts...)
		if err != nil || ok {
			return m, err
		}
	}
}

// read waits for the next message of the stream: ok when it is given
// out, else it was skipped (FollowOptions.Skipped).
func (f *Feed) read(opts ...jetstream.NextOpt) (m *Message, ok bool, err error) {
	raw, err := f.msgs.Next(opts...)
	switch {
	case errors.Is(err, nats.ErrTimeout) && f.ctx.Err() == nil:
		return nil, false, nats.ErrTimeout
	case err != nil && f.ctx.Err() != nil:
		return nil, false, f.ctx.Err()
	case err != nil:
		return nil, false, err
	}
	m, ok = f.admit(raw)
	return m, ok, nil
}

// History gives out, in stream order, the messages the stream held when
// the feed opened (Pending), then ends; one not read within wait of the
// one before ends it with nats.ErrTimeout, as the feed stopping does with
// its reason. The feed goes on after it, with what came since.
func (f *Feed) History(wait time.Duration) iter.Seq2[*Message, error] {
	return func(yield func(*Message, error) bool) {
		for left := f.Pending(); left > 0; {
			m, ok, err := f.read(jetstream.NextMaxWait(wait))
			if err != nil {
				yield(nil, err)
				return
			}
			left = min(left-1, f.pending)
			if ok && !yield(m, nil) {
				return
			}
		}
	}
}

// Drain gives out, in stream order, what the stream holds now that the
// feed has not given out yet, then ends (asking the server, as CaughtUp,
// when the feed has read all it knew of); the feed stopping ends it with
// its reason. The feed goes on after it.
func (f *Feed) Drain(ctx context.Context) iter.Seq2[*Message, error] {
	return func(yield func(*Message, error) bool) {
		for {
			if f.pending == 0 {
				done, err := f.caughtUp(ctx)
				if err != nil {
					yield(nil, err)
				}
				if done || err != nil {
					return
				}
			}
			m, ok, err := f.read(jetstream.NextMaxWait(drainWait))
			switch {
			case errors.Is(err, nats.ErrTimeout):
				continue
			case err != nil:
				yield(nil, err)
				return
			case ok && !yield(m, nil):
				return
			}
		}
	}
}

// drainWait is how long Drain waits for a message the server says it
// holds before it asks again.
const drainWait = 100 * time.Millisecond

// admit parses a stream message and applies events.Admit.
func (f *Feed) admit(m jetstream.Msg) (*Message, bool) {
	msg := &Message{Subject: m.Subject(), Header: nats.Header(m.Headers()), Data: m.Data()}
	if md, err := m.Metadata(); err == nil {
		msg.Seq, msg.ConsumerSeq, msg.Pending = md.Sequence.Stream, md.Sequence.Consumer, md.NumPending
		f.pending, f.readSeq = md.NumPending, md.Sequence.Stream
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
// the stream holds no message on the feed's subjects after the last one
// the feed read (by Next).
func (f *Feed) CaughtUp(ctx context.Context) bool {
	done, err := f.caughtUp(ctx)
	return err == nil && done
}

// caughtUp asks the stream's leader for the last message on each of the
// feed's subjects: the consumer's own count of what it has left
// (NumPending) can miss a message whose publish was just acknowledged, and
// a drain that trusted it ended before that message.
func (f *Feed) caughtUp(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, s := range f.subjects {
		last, err := eventbus.LastSeq(ctx, f.nc, f.stream, s)
		if err != nil || last > f.readSeq {
			return false, err
		}
	}
	return true, nil
}
